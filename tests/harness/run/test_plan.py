"""Planning: suite runs plus command-line options become validated, fully resolved specs."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from harness.core.errors import UnknownNameError, UsageError
from harness.run.plan import plan_runs, resolve
from harness.run.suites import Suite, load_suite
from harness.spec.specs import RunSpec
from workloads import get_workload

USABLE_CORES = len(os.sched_getaffinity(0))


def cli(**options: Any) -> dict[str, Any]:
    """Options as run_command passes them: every key present, unset ones None."""
    keys = ("workload", "size", "backend", "comm", "launcher", "precision", "nproc", "nnodes",
            "batch_size", "steps", "warmup", "mode", "repeat", "threads", "channels_last",
            "compile", "data", "seed")
    return {key: options.get(key) for key in keys}


def suite_of(*runs: dict[str, Any], name: str = "mine") -> Suite:
    return Suite(name=name, description="", runs=tuple(runs))


def specs(planned: list[tuple[RunSpec, int]]) -> list[RunSpec]:
    return [spec for spec, _ in planned]


@pytest.mark.parametrize("workload", ["alexnet", "resnet50", "hep_cnn", "lstm"])
@pytest.mark.parametrize("size", ["tiny", "small"])
def test_defaults_come_from_the_workload_preset(workload: str, size: str) -> None:
    (spec, repeat), = plan_runs(None, cli(workload=[workload], size=[size], backend=["cpu"]))
    preset = get_workload(workload).preset(size)
    assert repeat == 1
    assert spec.batch_per_rank == preset.default_batch("cpu")
    assert (spec.steps, spec.warmup) == (preset.steps, preset.warmup)
    assert (spec.comm, spec.launcher, spec.precision, spec.mode) == (
        "none", "local", "fp32", "throughput")
    assert spec.world_size == 1 and spec.suite is None
    assert spec.channels_last is (workload != "lstm")


def test_size_defaults_to_small_and_backend_to_the_best_available() -> None:
    from harness.run.plan import best_backend

    (spec, _), = plan_runs(None, cli(workload=["alexnet"]))
    assert spec.size == "small"
    assert spec.backend == best_backend()


def test_threads_default_to_usable_cores_per_rank() -> None:
    (one, _), = plan_runs(None, cli(workload=["lstm"], backend=["cpu"]))
    assert one.threads == USABLE_CORES
    (two, _), = plan_runs(None, cli(workload=["lstm"], backend=["cpu"], nproc=[2]))
    assert two.threads == max(1, USABLE_CORES // 2)
    assert two.comm == "gloo" and two.world_size == 2
    (given, _), = plan_runs(None, cli(workload=["lstm"], backend=["cpu"], threads=1))
    assert given.threads == 1


def test_cli_overrides_beat_the_suite() -> None:
    suite = suite_of({"workload": "hep_cnn", "size": "tiny", "steps": 9, "warmup": 4,
                      "batch_size": 2, "precision": "bf16"})
    (spec, _), = plan_runs(suite, cli(steps=3, warmup=0, batch_size=[5], precision=["fp32"],
                                      backend=["cpu"]))
    assert (spec.steps, spec.warmup, spec.batch_per_rank, spec.precision) == (3, 0, 5, "fp32")
    assert spec.suite == "mine"


def test_suite_values_beat_the_presets() -> None:
    suite = suite_of({"workload": "hep_cnn", "size": "tiny", "steps": 9, "warmup": 0,
                      "batch_size": 2, "repeat": 3, "seed": 5, "backend": "cpu"})
    (spec, repeat), = plan_runs(suite, cli())
    assert (spec.steps, spec.warmup, spec.batch_per_rank, spec.seed) == (9, 0, 2, 5)
    assert repeat == 3


def test_repeated_options_give_one_run_per_combination() -> None:
    planned = plan_runs(None, cli(workload=["alexnet", "lstm"], size=["tiny", "small"],
                                  precision=["fp32", "bf16"], backend=["cpu"]))
    combos = [(s.workload, s.size, s.precision) for s in specs(planned)]
    assert len(combos) == 8 == len(set(combos))
    assert set(combos) == {(w, z, p) for w in ("alexnet", "lstm") for z in ("tiny", "small")
                           for p in ("fp32", "bf16")}


def test_nproc_list_runs_each_world_size() -> None:
    planned = plan_runs(None, cli(workload=["hep_cnn"], size=["tiny"], backend=["cpu"],
                                  nproc=[1, 2, 4], comm=["gloo"]))
    assert [s.world_size for s in specs(planned)] == [1, 2, 4]
    assert all(s.comm == "gloo" for s in specs(planned))


def test_identical_runs_are_planned_once() -> None:
    suite = suite_of({"workload": "lstm", "size": "tiny", "precision": "fp32"},
                     {"workload": "lstm", "size": "tiny", "precision": "bf16"})
    planned = plan_runs(suite, cli(precision=["fp32"], backend=["cpu"]))
    assert len(planned) == 1


def test_workload_option_selects_within_a_suite() -> None:
    planned = plan_runs(load_suite("quick"), cli(workload=["lstm", "hep_cnn"], backend=["cpu"]))
    assert sorted(s.workload for s in specs(planned)) == ["hep_cnn", "lstm"]
    assert all(s.suite == "quick" and s.size == "small" for s in specs(planned))


def test_quick_suite_plans_four_valid_runs() -> None:
    planned = plan_runs(load_suite("quick"), cli())
    assert sorted(s.workload for s in specs(planned)) == ["alexnet", "hep_cnn", "lstm", "resnet50"]


def test_unknown_workload_inside_a_suite_is_an_error() -> None:
    with pytest.raises(UnknownNameError, match="choose from: alexnet"):
        plan_runs(load_suite("quick"), cli(workload=["vgg16"]))
    only_lstm = suite_of({"workload": "lstm"})
    with pytest.raises(UsageError, match="suite mine has no run of workload 'alexnet'"):
        plan_runs(only_lstm, cli(workload=["alexnet"]))


def test_precision_all_means_every_precision_of_the_backend() -> None:
    from backends import COMPUTE_BACKENDS

    planned = specs(plan_runs(load_suite("standard"), cli(backend=["cpu"])))
    assert {(s.workload, s.precision) for s in planned} == {
        (w, p) for w in ("alexnet", "resnet50", "hep_cnn", "lstm", "gpt")
        for p in ("fp32", "bf16")}
    cuda = specs(plan_runs(suite_of({"workload": "lstm", "precision": "all"}),
                           cli(backend=["cuda"])))
    assert [s.precision for s in cuda] == list(COMPUTE_BACKENDS.get("cuda").precisions)
    assert "fp16" in [s.precision for s in cuda]


def test_scaling_suite_plans_weak_scaling_with_threads_split_between_ranks() -> None:
    planned = specs(plan_runs(load_suite("scaling"), cli(backend=["cpu"])))
    single = [s for s in planned if s.world_size == 1]
    multi = [s for s in planned if s.world_size == 2]
    assert planned.index(multi[0]) > planned.index(single[-1])
    for spec in multi:
        match = next(s for s in single if s.workload == spec.workload)
        assert spec.batch_per_rank == match.batch_per_rank
        assert spec.threads == max(1, match.threads // 2)


def test_no_suite_and_no_workload_is_an_error() -> None:
    with pytest.raises(UsageError, match="no workload given"):
        plan_runs(None, cli())


def test_invalid_values_from_a_suite_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="unknown size 'huge'"):
        plan_runs(suite_of({"workload": "lstm", "size": "huge"}), cli())
    with pytest.raises(UsageError, match="fp16"):
        plan_runs(suite_of({"workload": "lstm", "precision": "fp16", "backend": "cpu"}), cli())


def test_resolve_applies_environment_and_validates() -> None:
    spec = resolve({"workload": "lstm", "size": "tiny", "backend": "cpu"}, "s")
    assert spec.suite == "s"
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in spec.env)
    with pytest.raises(UsageError):
        resolve({"workload": "lstm", "size": "tiny", "backend": "cpu", "nproc": 2,
                 "comm": "none"}, None)


def test_repeats_run_in_rounds_in_plan_order() -> None:
    from harness.commands.run import in_rounds

    assert in_rounds([("a", 3), ("b", 1), ("c", 2)]) == ["a", "b", "c", "a", "c", "a"]
    assert in_rounds([("a", 0), ("b", -1)]) == [] and in_rounds([]) == []


def test_repeated_options_merge_in_order_without_duplicates() -> None:
    from harness.commands.run import merge_repeated

    assert merge_repeated([[1, 2], [4], [2]]) == [1, 2, 4]
    assert merge_repeated(["lstm", "alexnet", "lstm"]) == ["lstm", "alexnet"]
    assert merge_repeated(None) is None and merge_repeated([]) is None


def test_mpi_ranks_default_to_mpirun_and_local_mpi_beyond_one_rank_is_refused() -> None:
    base = {"workload": "lstm", "size": "tiny", "backend": "cpu", "comm": "mpi"}
    assert resolve({**base, "nproc": 2}, None).launcher == "mpirun"
    assert resolve({**base, "nproc": 1}, None).launcher == "local"
    assert resolve({**base, "nproc": 2, "launcher": "slurm"}, None).launcher == "slurm"
    for launcher in ("local", "torchrun"):
        with pytest.raises(UsageError, match="--launcher mpirun"):
            resolve({**base, "nproc": 2, "launcher": launcher}, None)


@pytest.fixture
def gpu_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine whose best backend is CUDA (the planner's view only: nothing runs)."""
    monkeypatch.setattr("harness.run.plan.best_backend", lambda: "cuda")


@pytest.mark.parametrize("options, backend, comm", [
    ({"nproc": 2}, "cuda", "nccl"),  # GPUs talk over NCCL by default
    ({}, "cuda", "none"),
    ({"nproc": 2, "comm": "gloo"}, "cpu", "gloo"),  # a gloo run is a host run
    ({"nproc": 2, "comm": "mpi", "launcher": "mpirun"}, "cpu", "mpi"),
    ({"nproc": 3, "strategy": "ps-async"}, "cpu", "gloo"),  # no NCCL for parameter servers
    ({"nproc": 3, "strategy": "gossip"}, "cuda", "nccl"),  # batched point-to-point on NCCL
])
def test_on_a_gpu_machine_the_planner_picks_what_can_run(
        gpu_machine: None, options: dict[str, Any], backend: str, comm: str) -> None:
    spec = resolve({"workload": "hep_cnn", "size": "tiny", **options}, None)
    assert (spec.backend, spec.comm) == (backend, comm)


@pytest.mark.parametrize("options, reason", [
    ({"backend": "cuda", "comm": "gloo", "nproc": 2}, "host tensors only; use --comm nccl"),
    ({"backend": "cuda", "comm": "nccl", "nproc": 3, "strategy": "ps-async"},
     "receive from any source"),
    ({"backend": "cuda", "comm": "nccl", "nproc": 3, "strategy": "downpour"},
     "receive from any source"),
    ({"backend": "cuda", "comm": "nccl", "nproc": 2, "strategy": "hogwild"},
     "shared memory of one host"),
])
def test_a_combination_that_cannot_run_on_gpus_is_refused_with_its_reason(
        options: dict[str, Any], reason: str) -> None:
    with pytest.raises(UsageError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        resolve({"workload": "hep_cnn", "size": "tiny", **options}, None)


@pytest.mark.parametrize("strategy", ["ps-sync", "sandblaster"])
def test_a_strategy_with_serving_ranks_measures_a_fixed_count(strategy: str) -> None:
    """A precision target stops every rank on rank 0's broadcast word, which a serving rank
    (ps-sync's server, sandblaster's coordinator and shard) never hears: it hung there."""
    spec = resolve({"workload": "lstm", "size": "tiny", "nproc": 4, "strategy": strategy},
                   None)
    assert spec.target_ci is None and spec.max_time is None
    assert resolve({"workload": "lstm", "size": "tiny", "nproc": 2}, None).target_ci == 2.0
    with pytest.raises(UsageError, match="do not step together"):
        resolve({"workload": "lstm", "size": "tiny", "nproc": 4, "strategy": strategy,
                 "target_ci": 1.0}, None)
