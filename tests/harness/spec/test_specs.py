"""Run specs: validation of combinations, stable keys, and the dict a record stores."""
from __future__ import annotations

import re

import pytest

from harness.core.errors import UnknownNameError, UsageError
from harness.run.spec_checks import validate
from harness.spec.specs import RunSpec, performance_env

BASE = RunSpec(workload="alexnet", size="tiny", batch_per_rank=8, steps=3, warmup=1)


def test_a_plain_cpu_spec_is_valid() -> None:
    assert validate(BASE) is BASE


@pytest.mark.parametrize("field, value, valid", [
    ("workload", "vgg16", ["alexnet", "hep_cnn", "lstm", "resnet50"]),
    ("backend", "tpu", ["cpu", "cuda"]),
    ("size", "huge", ["tiny", "small", "full"]),
    ("precision", "fp64", ["fp32", "bf16", "fp16"]),
    ("mode", "fast", ["throughput", "ttt"]),
    ("comm", "smoke-signals", ["none", "gloo", "mpi", "nccl"]),
    ("launcher", "pbs", ["local", "torchrun", "mpirun", "slurm"]),
])
def test_unknown_choice_names_the_valid_ones(field: str, value: str, valid: list[str]) -> None:
    with pytest.raises(UsageError) as caught:
        validate(BASE.replace(**{field: value}))
    message = str(caught.value)
    assert repr(value) in message
    for choice in valid:
        assert choice in message


def test_unknown_workload_and_backend_come_from_registries() -> None:
    with pytest.raises(UnknownNameError):
        validate(BASE.replace(workload="vgg16"))
    with pytest.raises(UnknownNameError):
        validate(BASE.replace(backend="tpu"))


@pytest.mark.parametrize("field", ["batch_per_rank", "steps", "nproc_per_node", "nnodes"])
@pytest.mark.parametrize("value", [0, -1])
def test_counts_must_be_positive(field: str, value: int) -> None:
    with pytest.raises(UsageError, match=f"{field} must be positive, got {value}"):
        validate(BASE.replace(**{field: value}))


@pytest.mark.parametrize("field", ["warmup", "threads", "seed"])
def test_warmup_threads_and_seed_may_be_zero_but_not_negative(field: str) -> None:
    validate(BASE.replace(**{field: 0}))
    with pytest.raises(UsageError, match=f"{field} must be >= 0"):
        validate(BASE.replace(**{field: -1}))


@pytest.mark.parametrize("value", [1.5, "3", True])
def test_counts_must_be_integers(value: object) -> None:
    with pytest.raises(UsageError, match="steps must be an integer"):
        validate(BASE.replace(steps=value))


def test_nccl_needs_cuda_and_says_what_works_on_cpu() -> None:
    with pytest.raises(UsageError) as caught:
        validate(BASE.replace(comm="nccl"))
    assert "--backend cuda" in str(caught.value) and "gloo" in str(caught.value)
    validate(BASE.replace(comm="nccl", backend="cuda"))


def test_fp16_is_a_cuda_precision() -> None:
    with pytest.raises(UsageError) as caught:
        validate(BASE.replace(precision="fp16"))
    assert "fp32 or bf16" in str(caught.value)
    validate(BASE.replace(precision="bf16"))
    validate(BASE.replace(precision="fp16", backend="cuda"))


@pytest.mark.parametrize("changes", [{"nproc_per_node": 2}, {"nnodes": 2}])
def test_several_ranks_need_a_communication_backend(changes: dict[str, int]) -> None:
    with pytest.raises(UsageError, match="world size 2 needs a communication backend"):
        validate(BASE.replace(**changes))
    validate(BASE.replace(comm="gloo", **changes))


def test_key_is_stable_short_hex() -> None:
    again = RunSpec(workload="alexnet", size="tiny", batch_per_rank=8, steps=3, warmup=1)
    assert BASE.key() == again.key()
    assert re.fullmatch(r"[0-9a-f]{16}", BASE.key())


def test_key_ignores_seed_suite_and_env() -> None:
    varied = BASE.replace(seed=7, suite="quick", env=(("OMP_NUM_THREADS", "2"),))
    assert varied.key() == BASE.key()


@pytest.mark.parametrize("changes", [{"batch_per_rank": 16}, {"steps": 4}, {"precision": "bf16"},
                                     {"size": "small"}, {"workload": "lstm"}, {"threads": 1},
                                     {"nproc_per_node": 2, "comm": "gloo"}])
def test_key_changes_with_what_makes_runs_comparable(changes: dict[str, object]) -> None:
    assert BASE.replace(**changes).key() != BASE.key()


def test_as_dict_has_world_size_global_batch_and_env_mapping() -> None:
    spec = BASE.replace(nproc_per_node=2, nnodes=3, comm="gloo",
                        env=(("NCCL_DEBUG", "INFO"), ("OMP_NUM_THREADS", "1")))
    data = spec.as_dict()
    assert data["world_size"] == 6
    assert data["global_batch"] == 48
    assert data["env"] == {"NCCL_DEBUG": "INFO", "OMP_NUM_THREADS": "1"}
    for key in ("workload", "size", "backend", "comm", "launcher", "precision", "nnodes",
                "batch_per_rank", "steps", "warmup", "mode", "seed"):
        assert key in data


def test_spec_is_frozen_and_hashable() -> None:
    with pytest.raises(AttributeError):
        BASE.steps = 9  # type: ignore[misc]
    assert len({BASE, BASE.replace(), BASE.replace(steps=4)}) == 2


def test_performance_env_keeps_only_performance_variables_sorted() -> None:
    env = {"PATH": "/bin", "OMP_NUM_THREADS": "2", "NCCL_IB_DISABLE": "1", "HOME": "/root",
           "CUDA_VISIBLE_DEVICES": "0", "KMP_AFFINITY": "compact"}
    assert list(performance_env(env).items()) == [
        ("CUDA_VISIBLE_DEVICES", "0"), ("KMP_AFFINITY", "compact"), ("NCCL_IB_DISABLE", "1"),
        ("OMP_NUM_THREADS", "2")]
