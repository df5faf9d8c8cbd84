"""--compile (and --ipex) off|on|auto|default: how the runner settles them, what is cached,
what the record says. The probe's timings are replaced by fixed numbers here (a decision rule
is tested, not the machine)."""
from __future__ import annotations

from pathlib import Path

import pytest

from harness.commands.cli import build_parser
from harness.core.errors import UsageError
from harness.rank.loops import STEADY_SPREAD, steady
from harness.run import autocompile
from harness.run.autocompile import MARGIN, cached_choice, settle_compile, store_choice
from harness.run.plan import compile_mode, plan_runs
from harness.rundir import RankResult


def _spec(**options: object):
    cli = {"workload": ["hep_cnn"], "size": ["tiny"], "steps": 2, "warmup": 1, "threads": 1,
           **options}
    return plan_runs(None, cli)[0][0]


def test_compile_modes_from_the_command_line_and_suites() -> None:
    parser = build_parser()
    assert parser.parse_args(["run", "--compile"]).compile == "on"
    assert parser.parse_args(["run", "--compile", "auto"]).compile == "auto"
    assert parser.parse_args(["run"]).compile is None
    assert [compile_mode(v) for v in (None, True, False, "auto", "off")] == \
        ["default", "on", "off", "auto", "off"]
    with pytest.raises(UsageError, match="choose from"):
        compile_mode("sometimes")


def test_requested_modes_are_kept_as_asked(cache_dir: Path) -> None:
    spec = _spec(compile="on")
    settled, choice = settle_compile(spec)
    assert settled.compile is True and choice.source == "requested"
    settled, choice = settle_compile(_spec(compile="off"))
    assert settled.compile is False and choice.source == "requested"


def test_default_is_eager_until_a_decision_is_cached(cache_dir: Path) -> None:
    spec = _spec()
    assert spec.compile_mode == "default"
    settled, choice = settle_compile(spec)
    assert settled.compile is False and choice.source == "no decision cached"
    store_choice(spec, autocompile.Choice("auto", True, "measured", 1.0, 0.5, 30.0))
    settled, choice = settle_compile(spec)
    assert settled.compile is True and choice.source == "cached"
    assert choice.setup_s == 30.0
    # Another configuration (here the precision) has no decision of its own yet.
    assert cached_choice(_spec(precision=["bf16"])) is None


def _fake_probe(eager: float, compiled: float):
    def run(spec, *args, **kwargs) -> RankResult:
        step = compiled if spec.compile else eager
        return RankResult(rank=0, world_size=1, device_name="cpu", settings={},
                          step_times=[step] * 4, warmup_times=[step * 10, step, step])
    return run


@pytest.mark.parametrize("eager, compiled, chosen", [
    (1.0, 0.5, True), (1.0, MARGIN * 1.0, True), (1.0, 0.99, False), (1.0, 2.0, False)])
def test_auto_compiles_only_where_compiled_steps_are_faster_by_the_margin(
        cache_dir: Path, monkeypatch: pytest.MonkeyPatch, eager: float, compiled: float,
        chosen: bool) -> None:
    spec = _spec(compile="auto")
    settled, choice = settle_compile(spec, _fake_probe(eager, compiled))
    assert settled.compile is chosen and choice.source == "measured"
    assert choice.off_step_s == eager and choice.on_step_s == compiled
    assert choice.setup_s == pytest.approx(9 * compiled)  # first step less a steady one
    # The choice is cached: the default of the same configuration now follows it.
    assert settle_compile(_spec())[0].compile is chosen


def test_compile_mode_is_not_part_of_the_key() -> None:
    assert _spec(compile="default").key() == _spec(compile="off").key()
    assert _spec(compile="on").key() != _spec(compile="off").key()


def test_steady_warmup_rule() -> None:
    assert not steady([1.0, 1.0])
    assert steady([5.0, 1.0, 1.0, 1.0 + STEADY_SPREAD])
    assert not steady([1.0, 1.0, 1.0 + 2 * STEADY_SPREAD])


def test_ipex_auto_is_measured_like_compile(cache_dir: Path, monkeypatch: pytest.MonkeyPatch
                                            ) -> None:
    """Where IPEX is installed for this torch, auto times it against stock oneDNN and keeps
    it only where it wins; the default follows the cached result; compile is then settled
    with IPEX as chosen."""
    import backends.ipex
    from backends.base import Availability
    from harness.run.autocompile import settle_all

    monkeypatch.setattr(backends.ipex, "ipex_availability",
                        lambda *args, **kwargs: Availability.yes())

    def probe(spec, *args, **kwargs) -> RankResult:
        step = 0.5 if spec.ipex and not spec.compile else 1.0  # IPEX wins, compile does not
        return RankResult(rank=0, world_size=1, device_name="cpu", settings={},
                          step_times=[step] * 4, warmup_times=[step * 3, step])
    settled, choices = settle_all(_spec(ipex="auto", compile="auto"), probe)
    assert settled.ipex is True and choices["ipex"].source == "measured"
    assert settled.compile is False and choices["compile"].source == "measured"
    settled, choices = settle_all(_spec())
    assert settled.ipex is True and choices["ipex"].source == "cached"
    assert settled.key() == _spec(ipex="on").key() != _spec(ipex="off").key()


def test_ipex_default_without_ipex_stays_off_and_says_why(cache_dir: Path) -> None:
    from backends.ipex import ipex_availability
    from harness.run.autocompile import settle_all

    if ipex_availability().available:
        pytest.skip("IPEX is installed for this torch here")
    settled, choices = settle_all(_spec())
    assert settled.ipex is False
    assert "intel-extension-for-pytorch" in choices["ipex"].source


def test_the_probe_runs_in_a_rank_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """A probe is started as every run is, by the supervisor: nothing of it (compiled graphs,
    memory, thread settings) runs in, or stays behind in, the process that settles."""
    import torch

    import harness.rank.loops

    def in_this_process(*args: object, **kwargs: object) -> RankResult:
        raise AssertionError("the probe ran in the settling process")

    monkeypatch.setattr(harness.rank.loops, "run_throughput", in_this_process)
    threads = torch.get_num_threads()
    result = autocompile.probe_in_a_rank(autocompile._probe_spec(_spec(), "compile", False))
    assert len(result.step_times) == autocompile.PROBE_STEPS
    assert result.world_size == 1 and torch.get_num_threads() == threads


def test_the_probe_measures_its_own_fixed_count_not_the_runs_precision_target() -> None:
    from harness.spec.specs import RunSpec

    spec = RunSpec(workload="hep_cnn", size="tiny", batch_per_rank=4, steps=12, warmup=2,
                   target_ci=2.0, max_time=20.0, nproc_per_node=2, comm="gloo")
    for switch in ("compile", "ipex"):
        probe = autocompile._probe_spec(spec, switch, True)
        assert probe.target_ci is None and probe.max_time is None
        assert probe.steps == autocompile.PROBE_STEPS and probe.world_size == 1
