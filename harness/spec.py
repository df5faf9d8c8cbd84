"""The identity of a run: a frozen spec, validated once, separate from anything measured."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Any

from harness.errors import UsageError

SIZES = ("tiny", "small", "full")
PRECISIONS = ("fp32", "bf16", "fp16")
MODES = ("throughput", "ttt")
COMM_CHOICES = ("none", "gloo", "mpi", "nccl")
COMPRESSIONS = ("none", "fp16", "bf16", "powersgd")
LAUNCHER_CHOICES = ("local", "torchrun", "mpirun", "slurm")

# Environment variables that change performance; their values are part of a run's identity.
PERF_ENV_PREFIXES = ("OMP_", "MKL_", "KMP_", "DNNL_", "ONEDNN_", "NCCL_", "GLOO_", "CUDA_",
                     "TORCH_", "PYTORCH_", "OMPI_MCA_", "UCX_", "I_MPI_", "MPICH_",
                     "THP_", "DTBENCH_MALLOC")


def performance_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The subset of the environment that changes performance, sorted for stable keys."""
    environ = dict(os.environ if environ is None else environ)
    return {k: environ[k] for k in sorted(environ) if k.startswith(PERF_ENV_PREFIXES)}


@dataclass(frozen=True)
class RunSpec:
    """Everything that defines one benchmark run; two equal specs are the same experiment."""

    workload: str
    size: str = "small"
    backend: str = "cpu"
    comm: str = "none"
    launcher: str = "local"
    precision: str = "fp32"
    nproc_per_node: int = 1
    nnodes: int = 1
    batch_per_rank: int = 0
    steps: int = 0
    warmup: int = 0
    mode: str = "throughput"
    seed: int = 0
    threads: int = 0
    channels_last: bool = True
    compile: bool = False
    bucket_mb: int = 25
    compression: str = "none"
    data: str | None = None
    suite: str | None = None
    env: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.nnodes

    @property
    def global_batch(self) -> int:
        return self.batch_per_rank * self.world_size

    @property
    def distributed(self) -> bool:
        return self.world_size > 1 or self.comm != "none"

    def key(self) -> str:
        """A short stable hash of the fields that make two runs comparable (not seed or suite)."""
        identity = {k: v for k, v in self.as_dict().items() if k not in ("suite", "seed", "env")}
        blob = json.dumps(identity, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def label(self) -> str:
        return (f"{self.workload}/{self.size} {self.backend} {self.precision} "
                f"comm={self.comm} ws={self.world_size} bs={self.batch_per_rank}")

    def as_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["env"] = dict(self.env)
        data["world_size"] = self.world_size
        data["global_batch"] = self.global_batch
        return data

    def replace(self, **changes: Any) -> RunSpec:
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSpec:
        """Inverse of as_dict (derived fields dropped, env back to pairs)."""
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in names}
        values["env"] = tuple(sorted(dict(values.get("env") or {}).items()))
        return cls(**values)


@dataclass(frozen=True)
class LaunchOptions:
    """Where and how ranks start; not part of a run's identity (the same experiment can be
    launched from any node)."""

    node_rank: int = 0
    master_addr: str | None = None
    master_port: int = 0
    hostfile: str | None = None
    rank_timeout: float = 120.0


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
    from backends import COMPUTE_BACKENDS
    from workloads import WORKLOADS

    WORKLOADS.get(spec.workload)
    COMPUTE_BACKENDS.get(spec.backend)
    _check_choice("size", spec.size, SIZES)
    _check_choice("precision", spec.precision, PRECISIONS)
    _check_choice("mode", spec.mode, MODES)
    _check_choice("comm backend", spec.comm, COMM_CHOICES)
    _check_choice("launcher", spec.launcher, LAUNCHER_CHOICES)
    _check_choice("compression", spec.compression, COMPRESSIONS)
    for what in ("nproc_per_node", "nnodes", "batch_per_rank", "steps", "bucket_mb"):
        _check_positive(what, getattr(spec, what))
    _check_positive("warmup", spec.warmup, allow_zero=True)
    _check_positive("threads", spec.threads, allow_zero=True)
    _check_positive("seed", spec.seed, allow_zero=True)
    if spec.comm == "nccl" and spec.backend != "cuda":
        raise UsageError("--comm nccl needs --backend cuda; on cpu use --comm gloo or --comm mpi")
    if spec.world_size > 1 and spec.comm == "none":
        raise UsageError(f"world size {spec.world_size} needs a communication backend: "
                         "--comm gloo, mpi or nccl")
    if spec.compression != "none" and not spec.distributed:
        raise UsageError("--compression needs several ranks (-n 2 or more with --comm)")
    if spec.precision == "fp16" and spec.backend == "cpu":
        raise UsageError("fp16 with grad scaling is a CUDA precision; on cpu use fp32 or bf16")
    return spec
