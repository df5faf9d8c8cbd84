"""RunSpec's fields are the declaration (issue 42 item 1): a field declared once on the
dataclass, with its default beside its flag, reaches the command line, the suite keys, the
identity, the store's columns, the planner and the documentation's table, and no surface
holds a second default."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest

from harness.commands.options import Parser
from harness.commands.run import add_arguments, registry_choices, run_options
from harness.core.errors import UsageError
from harness.records.experiment import experiment_key
from harness.run.plan import plan_runs
from harness.run.suites import parse_suite
from harness.spec.fields import (
    declare,
    declared_fields,
    integer_columns,
    options_table,
    spec_key,
    store_columns,
    suite_keys,
)
from harness.spec.specs import RUN_FIELDS, LaunchOptions, RunSpec, run_fields, spec_defaults


@dataclass(frozen=True)
class RackedSpec(RunSpec):
    """A run that also names the rack its nodes sit in: one declaration, nothing else."""

    rack: str | None = declare(None, "--rack", suite=str, store=True, newer=True, report=18,
                               help="the rack the nodes sit in")
    racks: int = declare(1, "--racks", type=int, suite=int, store=True, store_type="bigint",
                         identity=False, help="racks the job spans (default {default})")


def _parser(spec: type[RunSpec]) -> Parser:
    parser = Parser(prog="dtbench run")
    add_arguments(parser, spec)
    return parser


def _suite(text: str, spec: type[RunSpec]) -> list[dict[str, object]]:
    return list(parse_suite(text, "suite t", "t", spec).runs)


SUITE = 'name = "racked"\n[[runs]]\nworkload = "lstm"\nsize = "tiny"\nrack = ["r1", "r2"]\n'


def test_a_field_declared_on_the_spec_is_an_option_with_its_help_and_default() -> None:
    args = _parser(RackedSpec).parse_args(["-w", "lstm", "--rack", "r7", "--racks", "2"])
    assert (args.rack, args.racks, args.workload) == ("r7", 2, ["lstm"])
    text = _parser(RackedSpec).format_help()
    assert "the rack the nodes sit in" in text and "(default 1)" in text
    with pytest.raises(UsageError, match="unrecognized arguments: --rack"):
        _parser(RunSpec).parse_args(["--rack", "r7"])


def test_a_field_declared_on_the_spec_is_a_suite_key() -> None:
    assert suite_keys(run_fields(RackedSpec))["rack"] is str
    assert [run["rack"] for run in _suite(SUITE, RackedSpec)] == ["r1", "r2"]
    with pytest.raises(UsageError, match="unknown key 'rack'"):
        _suite(SUITE, RunSpec)


def test_the_planner_fills_a_declared_field_from_options_suites_or_its_default() -> None:
    (given, _), = plan_runs(None, {"workload": ["lstm"], "size": ["tiny"], "rack": "r7"},
                            RackedSpec)
    (plain, _), = plan_runs(None, {"workload": ["lstm"], "size": ["tiny"]}, RackedSpec)
    assert isinstance(given, RackedSpec) and (given.rack, given.racks) == ("r7", 1)
    assert (plain.rack, plain.racks) == (None, 1)
    from_suite = plan_runs(parse_suite(SUITE, "suite t", "t", RackedSpec), {}, RackedSpec)
    assert sorted(spec.rack for spec, _ in from_suite) == ["r1", "r2"]


def test_a_declared_field_joins_the_identity_as_declared() -> None:
    base = RunSpec(workload="lstm", size="tiny")
    racked = RackedSpec(workload="lstm", size="tiny")
    # at its default a newer field leaves every existing key as it was ...
    assert racked.key() == base.key()
    assert spec_key(base.as_dict(), run_fields(RackedSpec)) == base.key()
    # ... a value makes another experiment, in the key and so in every view's identity,
    one, two = racked.replace(rack="r1"), racked.replace(rack="r2")
    assert one.key() != two.key()
    assert experiment_key({"spec": one.as_dict(), "spec_key": one.key()}) \
        != experiment_key({"spec": two.as_dict(), "spec_key": two.key()})
    # while a field declared outside the identity never does.
    assert racked.replace(racks=2).key() == racked.key()
    assert RackedSpec.from_dict(racked.replace(rack="r1").as_dict()) == racked.replace(rack="r1")


def test_a_declared_field_is_a_store_column_with_its_type() -> None:
    columns = store_columns(run_fields(RackedSpec))
    assert set(columns) == {*store_columns(RUN_FIELDS), "rack", "racks"}
    assert integer_columns(run_fields(RackedSpec)) == ("racks", "world_size")


def test_a_declared_field_is_a_row_of_the_documentation_table() -> None:
    table = options_table(run_options(RackedSpec), registry_choices())
    assert "| `--rack RACK` | the rack the nodes sit in |" in table
    assert "| `--racks RACKS` | racks the job spans (default 1) |" in table
    assert "--rack" not in options_table(run_options(), registry_choices())


def test_a_default_is_written_once_on_the_spec() -> None:
    """The planner, the help and the docs table all follow the dataclass's default."""
    declared = next(f for f in dataclasses.fields(RunSpec) if f.name == "size")

    @dataclass(frozen=True)
    class TinySpec(RunSpec):
        size: str = dataclasses.field(default="tiny", metadata=declared.metadata)

    (spec, _), = plan_runs(None, {"workload": ["lstm"]}, TinySpec)
    assert spec.size == spec_defaults(TinySpec)["size"] == "tiny"
    (small, _), = plan_runs(None, {"workload": ["lstm"]})
    assert small.size == spec_defaults()["size"] == RunSpec(workload="lstm").size == "small"
    assert "default tiny" in _parser(TinySpec).format_help()
    assert "workload preset (repeatable; default tiny)" in options_table(run_options(TinySpec))


def test_launch_options_not_given_keep_their_declared_defaults() -> None:
    from harness.commands.run import launch_options

    assert launch_options(_parser(RunSpec).parse_args([])) == LaunchOptions()
    given = launch_options(_parser(RunSpec).parse_args(["--rank-timeout", "30"]))
    assert given == LaunchOptions(rank_timeout=30.0) and isinstance(given.rank_timeout, float)
    assert "(default 120)" in _parser(RunSpec).format_help()


def test_an_undeclared_field_is_refused() -> None:
    @dataclass(frozen=True)
    class Careless(RunSpec):
        rack: str = "r1"

    with pytest.raises(TypeError, match="Careless.rack is not a declared run field"):
        declared_fields(Careless)


def test_comm_and_launcher_choices_are_the_registries() -> None:
    from backends import COMM_BACKENDS, LAUNCHERS

    assert registry_choices() == {"comm": COMM_BACKENDS.names(), "launcher": LAUNCHERS.names()}
    with pytest.raises(UsageError, match="invalid choice: 'ucc'"):
        _parser(RunSpec).parse_args(["--comm", "ucc"])
