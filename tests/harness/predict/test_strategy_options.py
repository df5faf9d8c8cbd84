"""One source for a strategy's options: `predict` and `run` resolve the same values through the
strategy class, for the defaults and for every name and alias of every option; the model
assumptions only predict takes are refused by a run; every registered strategy has a step
model and its own analytic traffic; `predict --json` states the options it modelled."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from harness.commands.cli import main
from harness.core.errors import UsageError
from harness.predict.scaleout import modelled, parse_option_pairs, step_model
from harness.run.plan import resolve
from harness.spec.specs import RunSpec
from harness.strategies import STRATEGIES
from harness.strategies.base import Option, Strategy, StrategyRegistry

# Ranks each strategy plans at with its defaults (hybrid: 2 groups of the 4 workers beside
# one server), and the options a run cannot start without (ssp's bound).
NPROC = {"hybrid": 5}
REQUIRED = {"ssp": {"staleness": "2"}}


def run_options(name: str, given: dict[str, str]) -> dict[str, Any]:
    """What a run of `name` uses: plan.resolve's spec, each option read as the rank reads it."""
    spec = resolve({"workload": "hep_cnn", "size": "tiny", "strategy": name, "comm": "gloo",
                    "nproc": NPROC.get(name, 4),
                    "strategy_options": {**REQUIRED.get(name, {}), **given}}, None)
    cls = STRATEGIES.get(name)
    return {o.name: cls.option_value(spec, o.name) for o in cls.options if not o.assumption}


def predict_options(name: str, given: dict[str, str]) -> dict[str, Any]:
    """What `dtbench predict --strategy NAME --strategy-opt K=V ...` prices."""
    pairs = [f"{k}={v}" for k, v in {**REQUIRED.get(name, {}), **given}.items()]
    return parse_option_pairs(pairs, [name])[name]


def without_assumptions(name: str, options: dict[str, Any]) -> dict[str, Any]:
    assumed = {o.name for o in STRATEGIES.get(name).options if o.assumption}
    return {k: v for k, v in options.items() if k not in assumed}


def candidates(option: Option) -> Iterator[str]:
    """Values other than the default, for the first a run of the strategy accepts."""
    if option.kind is bool:
        yield str(not option.default).lower()
    elif option.choices is not None:
        yield from (str(c) for c in option.choices if c != option.default)
    elif option.kind is float:
        yield from ("0.5", "2")
    elif option.kind is int:
        low = max(int(option.default or 0), int(option.minimum or 0))
        yield from (str(low + step) for step in range(1, 5))
    else:
        yield "x"


def accepted_value(name: str, option: Option) -> str:
    for value in candidates(option):
        try:
            run_options(name, {option.name: value})
        except UsageError:
            continue
        return value
    raise AssertionError(f"no run of {name} accepts any value of {option.name}")


def test_every_registered_strategy_names_a_step_model_that_predict_imports() -> None:
    assert modelled() == STRATEGIES.names()
    for name in STRATEGIES:
        assert callable(step_model(name)), name
        # each built-in says its own, none prices itself by a parent's model unawares
        assert "step_model" in vars(STRATEGIES.get(name)), name


@pytest.mark.parametrize("name", STRATEGIES.names())
def test_predict_and_run_resolve_the_same_defaults(name: str) -> None:
    predicted = predict_options(name, {})
    assert set(predicted) == {o.name for o in STRATEGIES.get(name).options}
    assert without_assumptions(name, predicted) == run_options(name, {})


@pytest.mark.parametrize("name", STRATEGIES.names())
def test_predict_and_run_resolve_every_name_and_alias_alike(name: str) -> None:
    for option in STRATEGIES.get(name).options:
        if option.assumption:
            continue
        value = accepted_value(name, option)
        for key in option.names:
            predicted = predict_options(name, {key: value})
            run = run_options(name, {key: value})
            assert without_assumptions(name, predicted) == run, (name, key)
            assert run[option.name] == option.parse(value, name) != option.default


@pytest.mark.parametrize("name", STRATEGIES.names())
def test_model_assumptions_are_priced_by_predict_and_refused_by_a_run(name: str) -> None:
    for option in STRATEGIES.get(name).options:
        if not option.assumption:
            continue
        value = next(candidates(option))
        for key in option.names:
            assert predict_options(name, {key: value})[option.name] == option.parse(value, name)
            with pytest.raises(UsageError, match="assumption of `dtbench predict`"):
                run_options(name, {key: value})


def test_the_defaults_that_used_to_disagree_are_the_classes() -> None:
    assert predict_options("localsgd", {})["period"] == 4
    assert predict_options("hybrid", {})["groups"] == 2
    assert predict_options("pipeline", {})["schedule"] == "gpipe"


def test_traffic_has_no_default() -> None:
    class Quiet(Strategy):
        name = "quiet"
        options: ClassVar[tuple[Option, ...]] = ()

        def setup(self) -> None:
            pass

        def step(self, inputs: Any, targets: Any) -> Any:
            return inputs

    assert "traffic" in Quiet.__abstractmethods__
    with pytest.raises(TypeError, match="traffic"):
        StrategyRegistry("strategy").register("quiet")(Quiet)
    with pytest.raises(TypeError):
        Quiet(RunSpec("hep_cnn"), None, None, None)  # type: ignore[arg-type, abstract]
    for name in STRATEGIES:
        cls = STRATEGIES.get(name)
        assert "traffic" not in getattr(cls, "__abstractmethods__", ())
        assert "traffic" in vars(cls) or any("traffic" in vars(base) for base in cls.__mro__[1:]
                                             if base is not Strategy), name


def test_predict_json_states_the_options_it_modelled(run_record: Any, comm_record: Any,
                                                     tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    for record in (run_record([0.30, 0.32, 0.34], threads=1, batch=32, run_id="single"),
                   comm_record("allreduce", 4e-4, 1e-9), comm_record("broadcast", 1e-4, 1e-9)):
        (store / f"{record['run_id']}.json").write_text(json.dumps(record))
    target = tmp_path / "p.json"
    assert main(["predict", "hep_cnn", "--calibrate-from", str(store), "--strategy", "localsgd",
                 "--strategy", "ssp", "--strategy-opt", "H=8", "--strategy-opt", "s=inf",
                 "--ranks", "2,4", "--json", str(target)]) == 0
    records = json.loads(target.read_text())
    stated = {r["spec"]["strategy"]: r["spec"]["strategy_options"] for r in records}
    assert stated["localsgd"] == {"period": 8, "subgroup": 1, "overlap": True}
    assert stated["ssp"] == {"servers": 1, "momentum": None, "damp_stale": True,
                             "staleness": "inf", "priority": False}
    roles = {r["spec"]["strategy"]: r["prediction"]["options"] for r in records}
    assert roles["localsgd"] == {"assumptions": ["overlap", "subgroup"], "not_priced": []}
    assert "staleness" in roles["ssp"]["not_priced"]
