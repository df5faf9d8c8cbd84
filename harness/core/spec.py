"""The identity of a run: frozen specs (what is measured and how ranks start), pure data."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Any, ClassVar

SIZES = ("tiny", "small", "full")
PRECISIONS = ("fp32", "bf16", "fp16")
MODES = ("throughput", "ttt")
COMM_CHOICES = ("none", "gloo", "mpi", "nccl")
COMPRESSIONS = ("none", "fp16", "bf16", "powersgd")
LAUNCHER_CHOICES = ("local", "torchrun", "mpirun", "slurm")
# Where peak_flops comes from: measured in the run itself, or the per-machine cache.
PEAK_SOURCES = ("in-run", "cached")

# Environment variables that change performance; their values are part of a run's identity.
PERF_ENV_PREFIXES = ("OMP_", "MKL_", "KMP_", "DNNL_", "ONEDNN_", "NCCL_", "GLOO_", "CUDA_",
                     "TORCH_", "PYTORCH_", "OMPI_MCA_", "UCX_", "I_MPI_", "MPICH_",
                     "THP_", "DTBENCH_MALLOC")


def performance_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The subset of the environment that changes performance, sorted for stable keys."""
    environ = dict(os.environ if environ is None else environ)
    return {k: environ[k] for k in sorted(environ) if k.startswith(PERF_ENV_PREFIXES)}


# Spec fields newer than the first records, with the values that reproduce their keys.
KEY_DEFAULTS: dict[str, Any] = {}


@dataclass(frozen=True)
class RunSpec:
    """Everything that defines one benchmark run; two equal specs are the same experiment."""

    kind: ClassVar[str] = "train"

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
    peak: str = "in-run"

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
        """A short stable hash of the fields that make two runs comparable (not seed, suite,
        environment or where the peak came from). Fields added since records were first
        written are left out while they hold their defaults, so the key of an unchanged
        experiment stays what older records carry."""
        identity = {k: v for k, v in self.as_dict().items()
                    if k not in ("suite", "seed", "env", "peak")
                    and not (k in KEY_DEFAULTS and v == KEY_DEFAULTS[k])}
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


@dataclass(frozen=True)
class CommSpec:
    """One `dtbench comm` invocation: which collectives, sizes, and how ranks are placed."""

    kind: ClassVar[str] = "comm"

    comm: str = "gloo"
    launcher: str = "local"
    nproc_per_node: int = 2
    nnodes: int = 1
    ops: tuple[str, ...] = ("allreduce",)
    sizes: tuple[int, ...] = (4 * 2**20,)
    iters: int = 20
    warmup: int = 5
    threads: int = 1

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.nnodes

    @property
    def backend(self) -> str:
        return "cuda" if self.comm == "nccl" else "cpu"

    def as_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data.update(task=self.kind, world_size=self.world_size, backend=self.backend)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CommSpec:
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in names}
        values["ops"], values["sizes"] = tuple(values["ops"]), tuple(values["sizes"])
        return cls(**values)


def task_from_dict(data: dict[str, Any]) -> RunSpec | CommSpec:
    """The task a spec document describes: a training run, or (task "comm") a collective
    microbenchmark."""
    if data.get("task") == CommSpec.kind:
        return CommSpec.from_dict(data)
    return RunSpec.from_dict(data)
