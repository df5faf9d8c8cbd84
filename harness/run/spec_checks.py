"""Reject nonsense run specs with a message that says what would work (docs/spec/command-line.md).

Availability on this machine is not checked here: an unavailable but valid choice becomes a
`skipped` record, while an invalid one is a usage error.
"""
from __future__ import annotations

from harness.core.errors import UsageError
from harness.spec.specs import (
    COMPILE_MODES,
    IPEX_MODES,
    MODES,
    PEAK_SOURCES,
    PRECISIONS,
    SIZES,
    RunSpec,
)
from harness.strategies import STRATEGIES


def _check_choice(what: str, value: str, choices: tuple[str, ...] | list[str]) -> None:
    if value not in choices:
        raise UsageError(f"unknown {what} {value!r}; choose from: {', '.join(choices)}")


def _check_positive(what: str, value: int, allow_zero: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{what} must be an integer, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise UsageError(f"{what} must be {'>= 0' if allow_zero else 'positive'}, got {value}")


def validate(spec: RunSpec) -> RunSpec:
    """Reject nonsense combinations with a message that says what would work.

    Availability on this machine is not checked here: an unavailable but valid choice becomes
    a `skipped` record, while an invalid one is a usage error.
    """
    from backends import COMM_BACKENDS, COMPUTE_BACKENDS, LAUNCHERS
    from workloads import WORKLOADS

    WORKLOADS.get(spec.workload)
    COMPUTE_BACKENDS.get(spec.backend)
    _check_choice("size", spec.size, SIZES)
    _check_choice("precision", spec.precision, PRECISIONS)
    _check_choice("mode", spec.mode, MODES)
    _check_choice("comm backend", spec.comm, COMM_BACKENDS.names())
    _check_choice("launcher", spec.launcher, LAUNCHERS.names())
    _check_choice("peak source", spec.peak, PEAK_SOURCES)
    _check_choice("compile mode", spec.compile_mode, COMPILE_MODES)
    _check_choice("ipex mode", spec.ipex_mode, IPEX_MODES)
    if spec.ipex and spec.backend != "cpu":
        raise UsageError(f"--ipex on is a plug-in of the cpu backend, not of {spec.backend}")
    if spec.profile:
        if spec.mode != "throughput" or not STRATEGIES.get(spec.strategy).synchronous:
            raise UsageError("--profile profiles steps after a throughput run's measured ones, "
                             "which every rank takes together: a synchronous strategy in "
                             f"throughput mode, not {spec.strategy} in {spec.mode} mode")
    for what in ("nproc_per_node", "nnodes", "batch_per_rank", "steps"):
        _check_positive(what, getattr(spec, what))
    _check_positive("warmup", spec.warmup, allow_zero=True)
    _check_positive("threads", spec.threads, allow_zero=True)
    _check_positive("seed", spec.seed, allow_zero=True)
    if spec.comm == "nccl" and spec.backend != "cuda":
        raise UsageError("--comm nccl needs --backend cuda; on cpu use --comm gloo or --comm mpi")
    if spec.backend == "cuda" and spec.comm in ("gloo", "mpi") and spec.world_size > 1:
        raise UsageError(f"--backend cuda with --comm {spec.comm}: dtbench counts the bytes of "
                         f"{spec.comm} on host tensors only; use --comm nccl on GPUs, or "
                         "--backend cpu")
    if spec.world_size > 1 and spec.comm == "none":
        raise UsageError(f"world size {spec.world_size} needs a communication backend: "
                         "--comm gloo, mpi or nccl")
    if spec.comm == "mpi" and spec.launcher not in ("mpirun", "slurm") and spec.world_size > 1:
        raise UsageError(f"--comm mpi needs its ranks started by MPI: use --launcher mpirun "
                         f"(or slurm); --launcher {spec.launcher} starts processes that are "
                         "each an MPI world of one")
    if spec.straggler is not None and spec.straggler[0] >= spec.world_size:
        raise UsageError(f"--straggler rank {spec.straggler[0]} is not a rank of this run "
                         f"(world size {spec.world_size})")
    STRATEGIES.get(spec.strategy).check(spec)
    if spec.precision == "fp16" and spec.backend == "cpu":
        raise UsageError("fp16 with grad scaling is a CUDA precision; on cpu use fp32 or bf16")
    return spec
