"""Run fields declared once: every surface (flags, suite keys, identity key, store and report
columns, compare's fallback) is derived from RUN_FIELDS, and a field added there reaches all."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.commands.options import Parser
from harness.core.errors import UsageError
from harness.spec.fields import (
    RunField,
    add_options,
    apart_fields,
    identity,
    multi_keys,
    option_keys,
    report_columns,
    spec_fields,
    spec_key,
    store_columns,
    suite_keys,
)
from harness.spec.specs import DDP_SPEC_OPTIONS, KEY_DEFAULTS, NOT_IN_KEY, RUN_FIELDS, RunSpec

RESULTS = Path(__file__).resolve().parents[3] / "results"
BASE = RunSpec(workload="lstm", size="tiny", batch_per_rank=8, steps=4, threads=2)
MACHINE_NAME = RunField("machine_name", ("--machine-name",), help="the machine's name",
                        suite=str, store=True, key_default=None, report=18)
OPERATOR = RunField("operator", ("--operator",), help="who ran it", suite=str, identity=False)
EXTENDED = (*RUN_FIELDS, MACHINE_NAME, OPERATOR)


def _train_records() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(RESULTS.rglob("*.json")):
        record = json.loads(path.read_text())
        if isinstance(record, dict) and "spec_key" in record \
                and record.get("spec", {}).get("task", "train") == "train":
            found.append((path.name, record))
    return found


def test_results_hold_training_records() -> None:
    assert len(_train_records()) >= 10


@pytest.mark.parametrize(("name", "record"), _train_records(), ids=lambda item: str(item)[:40])
def test_every_published_training_record_keeps_its_spec_key(name: str,
                                                            record: dict[str, Any]) -> None:
    assert RunSpec.from_dict(record["spec"]).key() == record["spec_key"], name
    assert spec_key(record["spec"], RUN_FIELDS) == record["spec_key"], name


def test_the_declared_spec_fields_are_the_run_specs() -> None:
    assert sorted(spec_fields(RUN_FIELDS)) == sorted(BASE.as_dict())


def test_identity_is_what_it_was_before_the_declaration() -> None:
    assert set(NOT_IN_KEY) == {"suite", "seed", "env", "peak", "replicas", "compile_mode",
                               "ipex_mode", "target_ci", "max_time", "profile",
                               "profile_steps"}
    assert KEY_DEFAULTS == {"strategy": "ddp", "strategy_options": {}, "straggler": None,
                            "straggler_work": "idle", "speed_probe": False,
                            "ipex": False, "loader_workers": 0, "skip_bad_samples": False,
                            "share_gpu": False, "optimizer": "default", "lr_scaling": "none",
                            "warmup_epochs": 0.0, "lars_eta": 0.001}
    assert DDP_SPEC_OPTIONS == {"bucket_mb": 25, "compression": "none"}


def test_command_line_and_suite_keys_are_what_they_were() -> None:
    from harness.commands.run import CLI_RUN_KEYS
    from harness.run.plan import MULTI_KEYS
    from harness.run.suites import RUN_KEYS

    assert MULTI_KEYS == ("workload", "size", "backend", "comm", "precision", "nproc",
                          "strategy", "batch_size")
    assert set(CLI_RUN_KEYS) == set(RUN_KEYS) == {
        "workload", "size", "backend", "comm", "launcher", "precision", "nproc", "nnodes",
        "batch_size", "steps", "warmup", "mode", "repeat", "threads", "channels_last",
        "compile", "ipex", "data", "seed", "bucket_mb", "compression", "peak", "strategy",
        "strategy_options", "straggler", "straggler_work", "speed_probe", "target_ci",
        "max_time",
        "loader_workers", "profile", "profile_steps", "share_gpu", "optimizer", "lr_scaling",
        "warmup_epochs", "lars_eta", "skip_bad_samples"}
    assert RUN_KEYS["compile"] == (bool, str) and RUN_KEYS["nproc"] is int


def test_store_report_and_compare_columns_come_from_the_declaration() -> None:
    from harness.compare.matching import NOT_IDENTITY
    from harness.records.summary import SUMMARY_COLUMNS
    from harness.report.view import SPEC_FIELDS
    from harness.spec.kinds import KEY_FIELDS
    from harness.store.directory import COLUMNS, STAMP_COLUMNS

    # the declared spec fields, then what whole-store commands read from the index
    assert set(COLUMNS) - set(SUMMARY_COLUMNS) - set(STAMP_COLUMNS) == {
        "run_id", "path", "created_at", "status", "workload", "size", "backend", "comm",
        "launcher", "precision", "world_size", "mode", "spec_key", "suite"}
    assert set(SUMMARY_COLUMNS) == {
        "task", "strategy", "machine", "code_commit", "code_branch", "code_dirty", "busy",
        "imprecise", "m_throughput", "m_step_time", "m_mfu", "m_peak_memory", "m_time_to_train",
        "m_achieved_flops", "m_scaling_efficiency"}
    assert SPEC_FIELDS == ("workload", "size", "backend", "comm", "launcher", "precision",
                           "world_size", "nnodes", "threads", "batch_per_rank", "global_batch",
                           "mode", "op", "suite", "kernel", "pass", "algorithm")
    assert set(KEY_FIELDS) == set(store_columns(RUN_FIELDS)) - set(NOT_IN_KEY)
    assert NOT_IDENTITY == set(NOT_IN_KEY) - set(apart_fields(RUN_FIELDS)) == set(NOT_IN_KEY) - {
        "suite"}


def test_the_experiment_is_the_key_and_the_fields_kept_apart_beside_it() -> None:
    """The suite stays out of the key (published records keep theirs) but tells experiments
    apart: every view's identity is the declared one."""
    from harness.records.experiment import experiment_key
    from harness.spec.kinds import IDENTITY_FIELDS

    assert apart_fields(RUN_FIELDS) == ("suite",)
    assert set(IDENTITY_FIELDS) == set(spec_fields(RUN_FIELDS)) - set(NOT_IN_KEY) | {"suite"}
    spec = RunSpec(workload="lstm", size="tiny")
    quick, scaling = (spec.replace(suite=name) for name in ("quick", "scaling"))
    assert quick.key() == scaling.key() == spec.key()
    keys = {experiment_key({"spec": s.as_dict(), "spec_key": s.key()})
            for s in (spec, quick, scaling)}
    assert len(keys) == 3


def test_a_field_added_to_the_declaration_appears_on_every_surface() -> None:
    parser = Parser(prog="dtbench run")
    add_options(parser, EXTENDED)
    args = parser.parse_args(["--machine-name", "node7", "--operator", "ana", "-w", "lstm"])
    assert (args.machine_name, args.operator, args.workload) == ("node7", "ana", ["lstm"])
    assert "the machine's name" in parser.format_help()
    assert "machine_name" in option_keys(EXTENDED)
    assert suite_keys(EXTENDED)["machine_name"] is str
    assert "machine_name" in store_columns(EXTENDED)
    assert report_columns(EXTENDED)[-1] == "machine_name"
    assert "machine_name" in spec_fields(EXTENDED)

    spec = BASE.as_dict()
    # Absent or at its key_default the new field leaves every existing key as it was ...
    assert spec_key(spec, EXTENDED) == spec_key({**spec, "machine_name": None}, EXTENDED) \
        == BASE.key()
    # ... and as part of the identity its value makes a different experiment,
    assert spec_key({**spec, "machine_name": "a"}, EXTENDED) \
        != spec_key({**spec, "machine_name": "b"}, EXTENDED)
    # while a field declared outside the identity never does.
    assert spec_key({**spec, "operator": "a"}, EXTENDED) \
        == spec_key({**spec, "operator": "b"}, EXTENDED) == BASE.key()


def test_a_repeatable_field_nests_where_its_rank_says() -> None:
    extra = RunField("machine_name", ("--machine-name",), suite=str, multi=8)
    assert multi_keys((*RUN_FIELDS, extra))[-1] == "machine_name"
    parser = Parser(prog="dtbench run")
    add_options(parser, (*RUN_FIELDS, extra))
    assert parser.parse_args(["--machine-name", "a", "--machine-name", "b"]).machine_name \
        == ["a", "b"]


def test_a_bad_value_of_a_declared_field_is_a_usage_error() -> None:
    parser = Parser(prog="dtbench run")
    add_options(parser, RUN_FIELDS)
    with pytest.raises(UsageError, match="expected a positive integer, got '0'"):
        parser.parse_args(["--steps", "0"])


def test_ddp_legacy_options_key_like_the_spec_fields_they_were() -> None:
    """A pre-strategy record keeps bucket_mb at the top of its spec; its identity reads it
    there, so compare's fallback and RunSpec.key() agree on it."""
    old = {k: v for k, v in BASE.as_dict().items() if k not in KEY_DEFAULTS}
    assert identity({**old, "bucket_mb": 5}, RUN_FIELDS)["bucket_mb"] == 5
    assert spec_key({**old, "bucket_mb": 5}, RUN_FIELDS) \
        == BASE.replace(strategy_options=(("bucket_mb", 5),)).key()
    assert spec_key(old, RUN_FIELDS) == BASE.key()
