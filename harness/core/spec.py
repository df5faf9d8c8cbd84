"""The identity of a run: frozen specs (what is measured and how ranks start), pure data."""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, ClassVar

from harness.core.fields import (
    RunField,
    commit_name,
    int_list,
    key_defaults,
    legacy_options,
    machine_name,
    non_negative_float,
    non_negative_int,
    not_in_key,
    positive_float,
    positive_int,
    spec_key,
)

SIZES = ("tiny", "small", "full")
# Large-batch training (workloads/optimizers.py, which checks the same names)
OPTIMIZERS = ("default", "lars", "lamb")
LR_SCALINGS = ("none", "linear", "sqrt")
LARS_ETA = 0.001  # You et al. 2017's trust coefficient
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


_PEAK_HELP = ("where peak_flops (the MFU denominator) comes from: in-run (timed before the "
              "warm-up and after the measured steps; default) or cached (the highest reading "
              "of `dtbench peak` on this hardware); DTBENCH_PEAK sets the default")
_COMPILE_HELP = ("torch.compile: on, off, auto (the choice cached for this hardware and "
                 "configuration, else time eager against compiled steps now and cache the "
                 "faster) or default (the cached choice where one exists, else eager); a bare "
                 "--compile is on")
_IPEX_HELP = ("Intel Extension for PyTorch on the cpu backend, chosen like --compile: on (a "
              "skipped record says why where it cannot be used), off, auto, or default (a "
              "cached measured win, else off)")

# Every field of a run, in the order `dtbench run --help` lists them.
RUN_FIELDS: tuple[RunField, ...] = (
    RunField("workload", ("-w", "--workload"), suite=str, multi=1, store=True, baseline=True,
             report=1,
             help="workload to run (repeatable; dtbench list names them)"),
    RunField("backend", ("-b", "--backend"), help="cpu, cuda or auto", suite=str, multi=3,
             store=True, baseline=True, report=3),
    RunField("comm", ("--comm",), choices=COMM_CHOICES, suite=str, multi=4, store=True,
             report=4,
             help="how ranks exchange (default: none for one rank, nccl on GPUs, else gloo)"),
    RunField("launcher", ("--launcher",), choices=LAUNCHER_CHOICES, suite=str, store=True,
             report=5,
             help="how ranks start (default: local; mpirun with --comm mpi)"),
    RunField("nproc", ("-n", "--nproc"), type=int_list, action="append", suite=int, multi=6,
             help="ranks per node; a comma list such as 1,2,4 runs each",
             spec="nproc_per_node"),
    RunField("nnodes", ("--nnodes",), type=positive_int, suite=int, report=8,
             help="nodes of a multi-node run (default 1)"),
    RunField("node_rank", ("--node-rank",), type=non_negative_int, launch=True,
             help="this node's rank in a torchrun-style multi-node run (default 0)"),
    RunField("master_addr", ("--master-addr",), launch=True,
             help="the rendezvous host of a multi-node run (default 127.0.0.1)"),
    RunField("master_port", ("--master-port",), type=positive_int, launch=True,
             help="the rendezvous port (default: a free one)"),
    RunField("hostfile", ("--hostfile",), launch=True,
             help="mpirun's host file for a multi-node MPI run"),
    RunField("strategy", ("--strategy",), suite=str, multi=7, key_default="ddp",
             help="how the run is distributed (dtbench list shows them); repeatable"),
    RunField("strategy_options", ("--strategy-opt",), action="append", metavar="KEY=VALUE",
             help="an option of the strategy; repeatable", suite=dict, key_default={}),
    RunField("straggler", ("--straggler",), metavar="RANK:FACTOR", suite=str, key_default=None,
             help="that rank's compute takes FACTOR times as long, e.g. 1:3"),
    RunField("bucket_mb", ("--bucket-mb",), type=positive_int, suite=int, spec=None,
             help="DDP gradient bucket size (MiB)", strategy_option="ddp", key_default=25),
    RunField("compression", ("--compression",), choices=COMPRESSIONS, suite=str, spec=None,
             help="gradient compression hook for multi-rank runs", strategy_option="ddp",
             key_default="none"),
    RunField("rank_timeout", ("--rank-timeout",), type=positive_int, default=120, launch=True,
             help="seconds without progress before a rank counts as hung (default 120)"),
    RunField("comm_timeout", ("--comm-timeout",), type=positive_int, default=600, launch=True,
             help="seconds an NCCL collective may wait before NCCL's watchdog aborts the rank "
                  "(default 600, torch's); gloo and MPI ranks wait --rank-timeout"),
    RunField("precision", ("--precision",), choices=PRECISIONS, suite=str, multi=5, store=True,
             baseline=True, report=6,
             help="numeric precision (repeatable; default fp32)"),
    RunField("size", ("--size",), choices=SIZES, suite=str, multi=2, store=True, baseline=True,
             report=2,
             help="workload preset (repeatable; default small)"),
    RunField("batch_size", ("--batch-size",), type=int_list, action="append", suite=int,
             multi=8, spec="batch_per_rank", report=10,
             help="per rank; a comma list such as 8,16,32 runs each (a batch sweep, which "
             "`predict` fits its compute curve to)"),
    RunField("optimizer", ("--optimizer",), choices=OPTIMIZERS, suite=str,
             key_default="default",
             help="default (the workload's), lars (its SGD with a layer-wise trust ratio, You "
             "et al. 2017) or lamb (Adam's moments with a layer-wise trust ratio, You et al. "
             "2019)"),
    RunField("lr_scaling", ("--lr-scaling",), choices=LR_SCALINGS, suite=str, key_default="none",
             help="the workload's learning rate times k (linear) or sqrt(k) for k = global batch "
             "/ the workload's default batch; none (default) keeps it"),
    RunField("warmup_epochs", ("--warmup-epochs",), type=non_negative_float, suite=(int, float),
             key_default=0.0, metavar="EPOCHS",
             help="time-to-train: ramp the learning rate linearly from rate/W to the rate "
             "over the first W steps, W = EPOCHS x steps per epoch (default 0: none)"),
    RunField("lars_eta", ("--lars-eta",), type=positive_float, suite=(int, float),
             key_default=LARS_ETA, metavar="ETA",
             help="LARS's trust coefficient: a weight tensor's rate is the global rate times "
             "ETA |w| / (|g| + decay |w|) (default 0.001, You et al.)"),
    RunField("steps", ("--steps",), type=positive_int, suite=int,
             help="measure exactly N steps (default: until --target-ci, at least the workload's "
             "count)"),
    RunField("warmup", ("--warmup",), type=non_negative_int, suite=int, minimum=0,
             help="warm-up steps before measuring (default: the workload's)"),
    RunField("target_ci", ("--target-ci",), type=positive_float, metavar="PCT",
             suite=(int, float), identity=False,
             help="throughput runs measure until the 95%% interval of the median step time is "
             "within PCT%% of it (default 2) or --max-time is spent; --steps N measures "
             "exactly N steps instead"),
    RunField("max_time", ("--max-time",), type=positive_float, metavar="SECONDS",
             suite=(int, float), identity=False,
             help="time budget of a throughput run's measured steps (default 20)"),
    RunField("mode", ("--mode",), choices=MODES, suite=str, store=True, baseline=True,
             report=12,
             help="throughput (speed) or ttt (train to the quality target); default throughput"),
    RunField("repeat", ("--repeat",), type=positive_int, suite=int, spec=None,
             help="run each combination N times, round by round, each in fresh processes (default "
             "1)"),
    RunField("threads", ("--threads",), type=positive_int, help="CPU threads per rank",
             suite=int, minimum=0, report=9),
    RunField("seed", ("--seed",), type=non_negative_int, suite=int, minimum=0, identity=False,
             help="random seed of parameters and data (default 0)"),
    RunField("compile", ("--compile",), nargs="?", const="on", choices=COMPILE_MODES,
             default=None, help=_COMPILE_HELP, suite=(bool, str)),
    RunField("ipex", ("--ipex",), choices=IPEX_MODES, default=None, help=_IPEX_HELP, suite=str,
             key_default=False),
    RunField("channels_last", ("--no-channels-last",), action="store_false", default=None,
             suite=bool,
             help="keep the default memory format for CNNs (default: channels-last)"),
    RunField("peak", ("--peak",), choices=PEAK_SOURCES, help=_PEAK_HELP, suite=str,
             identity=False),
    RunField("oversubscribe", ("--oversubscribe",), action="store_true", launch=True,
             help="run even when ranks x threads exceed 4x the usable cores or the estimated "
             "memory exceeds the machine's"),
    RunField("profile", ("--profile",), action="store_true", default=None, suite=bool,
             identity=False, key_default=False,
             help="after the measured steps, profile --profile-steps more on every rank with "
             "torch.profiler: one trace per rank kept beside the record, and the time "
             "breakdown read from them (the profiled steps stay out of every figure)"),
    RunField("profile_steps", ("--profile-steps",), type=positive_int, suite=int,
             identity=False, key_default=3, metavar="N",
             help="steps profiled with --profile (default 3)"),
    RunField("share_gpu", ("--share-gpu",), action="store_true", default=None, suite=bool,
             key_default=False,
             help="let ranks on a node share a GPU (refused otherwise: NCCL cannot, and a "
             "board's energy and peak would count twice); each GPU's energy and peak then "
             "count once, MFU per GPU"),
    RunField("data", ("--data",), suite=str,
             help="read samples from files: an image folder, WebDataset tar shards, HDF5 or a "
             "tokens file (dtbench data make), in throughput and time-to-train runs; .npz/.h5 "
             "arrays or text for time-to-train"),
    RunField("loader_workers", ("--loader-workers",), type=non_negative_int, suite=int,
             minimum=0, key_default=0,
             help="DataLoader worker processes reading --data (0: the training loop reads)"),
    RunField("skip_bad_samples", ("--skip-bad-samples",), action="store_true", default=None,
             suite=bool, key_default=False,
             help="skip samples that cannot be read or decoded, counted in the record"),
    RunField("out", ("--out",), default="results", help="results store (default ./results)",
             launch=True),
    RunField("json_file", ("--json",), help="also write this run's records here", launch=True),
    RunField("machine", ("--machine",), metavar="NAME", launch=True, type=machine_name,
             help="name this machine in the records (default: its CPU's microarchitecture "
             "and cores)"),
    RunField("commit", ("--commit",), launch=True, type=commit_name,
             help="the commit of the code being benchmarked (default: the working "
             "directory's git HEAD)"),
    RunField("resume", ("--resume",), action="store_true", launch=True,
             help="skip runs that already have success records in the store"),
    RunField("quiet", ("-q", "--quiet"), action="store_true", help="no progress display",
             launch=True),
    # Spec fields the planner settles or derives; no option sets them directly.
    RunField("compile_mode", identity=False),
    RunField("ipex_mode", identity=False),
    # not in the key (published records keep theirs), but a quick-suite run is never pooled
    # with a scaling-suite one: apart
    RunField("suite", identity=False, apart=True, store=True, report=14),
    RunField("env", identity=False),
    RunField("replicas", identity=False),
    RunField("world_size", store=True, report=7),
    RunField("global_batch", report=11),
)

# Spec fields newer than the first records, with the values that reproduce their keys.
KEY_DEFAULTS: dict[str, Any] = key_defaults(RUN_FIELDS)
# Options of the ddp strategy that older records kept as spec fields (and in their keys).
DDP_SPEC_OPTIONS = legacy_options(RUN_FIELDS, "ddp")
# Derived or descriptive fields that never make two runs different experiments.
NOT_IN_KEY = not_in_key(RUN_FIELDS)


@dataclass(frozen=True)
class RunSpec:
    """Everything that defines one benchmark run; two equal specs are the same experiment.
    Each field is declared in RUN_FIELDS too, where its flag, suite key and identity live."""

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
    # Measure until the 95% interval of the median step time is within this fraction of it
    # (steps is then the least count), or max_time seconds are spent; None: exactly `steps`.
    target_ci: float | None = None
    max_time: float | None = None
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
    loader_workers: int = 0
    skip_bad_samples: bool = False
    share_gpu: bool = False
    profile: bool = False
    profile_steps: int = 3
    suite: str | None = None
    env: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    peak: str = "in-run"
    strategy: str = "ddp"
    # the strategy's options, validated and typed by the strategy, sorted by name
    strategy_options: tuple[tuple[str, Any], ...] = ()
    # (rank, factor): that rank's compute takes factor times as long (heterogeneity)
    straggler: tuple[int, float] | None = None
    # large-batch training: workloads/optimizers.py
    optimizer: str = "default"
    lr_scaling: str = "none"
    warmup_epochs: float = 0.0
    lars_eta: float = LARS_ETA
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
        return spec_key(self.as_dict(), RUN_FIELDS)

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
    comm_timeout: float = 600.0


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
