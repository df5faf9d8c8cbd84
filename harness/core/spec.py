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
# torch.compile: off, on, auto (measure eager against compiled now and cache the winner), or
# default (the cached winner for this machine and configuration where one exists, else eager).
COMPILE_MODES = ("off", "on", "auto", "default")
# Intel Extension for PyTorch on the cpu backend, chosen the same way: on requires it (a
# skipped record says why it cannot be used), auto measures it, default follows a cached win.
IPEX_MODES = ("off", "on", "auto", "default")

# Environment variables that change performance; their values are part of a run's identity.
PERF_ENV_PREFIXES = ("OMP_", "MKL_", "KMP_", "DNNL_", "ONEDNN_", "NCCL_", "GLOO_", "CUDA_",
                     "TORCH_", "PYTORCH_", "OMPI_MCA_", "UCX_", "I_MPI_", "MPICH_",
                     "THP_", "DTBENCH_MALLOC")


def performance_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The subset of the environment that changes performance, sorted for stable keys."""
    environ = dict(os.environ if environ is None else environ)
    return {k: environ[k] for k in sorted(environ) if k.startswith(PERF_ENV_PREFIXES)}


# Spec fields newer than the first records, with the values that reproduce their keys.
KEY_DEFAULTS: dict[str, Any] = {"strategy": "ddp", "strategy_options": {}, "straggler": None,
                                "ipex": False}
# Options of the ddp strategy that older records kept as spec fields (and in their keys).
DDP_SPEC_OPTIONS = {"bucket_mb": 25, "compression": "none"}
# Derived or descriptive fields that never make two runs different experiments.
NOT_IN_KEY = ("suite", "seed", "env", "peak", "replicas", "compile_mode", "ipex_mode")


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
    # whether the model is compiled; with compile_mode auto or default the runner settles it
    compile: bool = False
    compile_mode: str = "off"
    # whether IPEX rewrites model and optimizer; with ipex_mode auto or default the runner
    # settles it
    ipex: bool = False
    ipex_mode: str = "off"
    data: str | None = None
    suite: str | None = None
    env: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    peak: str = "in-run"
    strategy: str = "ddp"
    # the strategy's options, validated and typed by the strategy, sorted by name
    strategy_options: tuple[tuple[str, Any], ...] = ()
    # (rank, factor): that rank's compute takes factor times as long (heterogeneity)
    straggler: tuple[int, float] | None = None
    # data-parallel replicas that each take batch_per_rank samples a step (0: every rank);
    # set from the strategy when the spec is planned (pipeline stages share one batch)
    replicas: int = 0

    @property
    def world_size(self) -> int:
        return self.nproc_per_node * self.nnodes

    @property
    def global_batch(self) -> int:
        """Samples consumed per step by the whole job."""
        return self.batch_per_rank * (self.replicas or self.world_size)

    @property
    def options(self) -> dict[str, Any]:
        """The strategy's options as a dict."""
        return dict(self.strategy_options)

    def option(self, name: str, default: Any = None) -> Any:
        return self.options.get(name, default)

    @property
    def distributed(self) -> bool:
        return self.world_size > 1 or self.comm != "none"

    def key(self) -> str:
        """A short stable hash of the fields that make two runs comparable (not seed, suite,
        environment or where the peak came from). Fields added since records were first
        written are left out while they hold their defaults, so the key of an unchanged
        experiment stays what older records carry."""
        identity = {k: v for k, v in self.as_dict().items()
                    if k not in NOT_IN_KEY and not (k in KEY_DEFAULTS and v == KEY_DEFAULTS[k])}
        if self.strategy == "ddp":
            # ddp's bucket size and compression were spec fields before strategies existed.
            options = identity.pop("strategy_options", {})
            identity.update({name: options.get(name, default)
                             for name, default in DDP_SPEC_OPTIONS.items()})
            identity.update({k: v for k, v in options.items() if k not in DDP_SPEC_OPTIONS})
        blob = json.dumps(identity, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def label(self) -> str:
        options = "".join(f" {k}={v}" for k, v in self.strategy_options)
        return (f"{self.workload}/{self.size} {self.backend} {self.precision} "
                f"comm={self.comm} ws={self.world_size} bs={self.batch_per_rank} "
                f"{self.strategy}{options}")

    def as_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["env"] = dict(self.env)
        data["strategy_options"] = dict(self.strategy_options)
        data["straggler"] = list(self.straggler) if self.straggler else None
        data["world_size"] = self.world_size
        data["global_batch"] = self.global_batch
        return data

    def replace(self, **changes: Any) -> RunSpec:
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSpec:
        """Inverse of as_dict (derived fields dropped, env back to pairs). A record from before
        strategies existed reads as ddp, its bucket size and compression as ddp's options."""
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in names}
        values["env"] = tuple(sorted(dict(values.get("env") or {}).items()))
        options = dict(values.get("strategy_options") or {})
        if values.get("strategy", "ddp") == "ddp":
            for name, default in DDP_SPEC_OPTIONS.items():
                if name in data and data[name] != default:
                    options.setdefault(name, data[name])
        values["strategy_options"] = tuple(sorted(options.items()))
        straggler = values.get("straggler")
        values["straggler"] = (int(straggler[0]), float(straggler[1])) if straggler else None
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
