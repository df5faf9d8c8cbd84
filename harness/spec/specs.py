"""The identity of a run: frozen specs (what is measured and how ranks start), pure data."""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, replace
from functools import cache
from typing import Any, ClassVar

from harness.spec.fields import (
    MISSING,
    RunField,
    declare,
    declared_fields,
    field_defaults,
    int_list,
    key_defaults,
    legacy_options,
    non_negative_float,
    non_negative_int,
    not_in_key,
    positive_float,
    positive_int,
    spec_key,
)

SIZES = ("tiny", "small", "full")
# What a straggler does for its extra time: sleep (a slow worker) or compute (slower code)
STRAGGLER_WORK = ("idle", "busy")
# Large-batch training (workloads/optimizers.py, which checks the same names)
OPTIMIZERS = ("default", "lars", "lamb")
LR_SCALINGS = ("none", "linear", "sqrt")
LARS_ETA = 0.001  # You et al. 2017's trust coefficient
PRECISIONS = ("fp32", "bf16", "fp16")
MODES = ("throughput", "ttt")
COMPRESSIONS = ("none", "fp16", "bf16", "powersgd")
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


_PEAK_HELP = ("a CPU's MFU denominator: in-run (timed before the warm-up and after the steps; "
              "default) or cached (the best `dtbench peak` here); a GPU's is each device's "
              "sustained peak, in-run readings beside it; DTBENCH_PEAK sets the default")
_COMPILE_HELP = ("torch.compile: on, off, auto (the choice cached for this hardware and "
                 "configuration, else time eager against compiled steps now and cache the "
                 "faster) or default (the cached choice where one exists, else eager; the default "
                 "without --compile); a bare --compile is on")
_IPEX_HELP = ("Intel Extension for PyTorch on the cpu backend, chosen like --compile: on (a "
              "skipped record says why where it cannot be used), off, auto, or default (a "
              "cached measured win, else off; the default without --ipex)")

# The precision a throughput run measures to (95% interval of the median step time, percent)
# and its time budget (seconds of measured steps) unless told otherwise: measured on the
# 2-core development machine, the quick suite's workloads reach 1-1.5% in their least step
# count when the machine is quiet (docs/measurements/precision.md).
DEFAULT_TARGET_CI = 2.0
DEFAULT_MAX_TIME = 20.0


@dataclass(frozen=True)
class RunSpec:
    """Everything that defines one benchmark run; two equal specs are the same experiment.

    Each field is the declaration of a run field: beside its default, `declare` keeps its
    flag and help, its suite type, whether it is part of the identity, and its store and report
    columns (harness/spec/fields.py). The command line, suites, identity key, store, planner
    and docs/spec/command-line.md all read them from here; a subclass that declares one more
    field reaches every one of them (tests/harness/spec/test_declaration.py)."""

    kind: ClassVar[str] = "train"

    workload: str = declare(MISSING, "-w", "--workload", suite=str, multi=1, store=True,
                            baseline=True, report=1, help="workload to run (repeatable; "
                            "dtbench list names them; default: the suite's)")
    backend: str = declare("cpu", "-b", "--backend", suite=str, multi=3, store=True,
                           baseline=True, report=3, help="cpu, cuda or auto (default: auto)",
                           doc="compute backend (default: the best available)")
    # its choices are the comm registry's names (backends/), given where the parser is built
    comm: str = declare("none", "--comm", suite=str, multi=4, store=True, report=4,
                        help="how ranks exchange (default: none for one rank, nccl on GPUs, "
                        "else gloo)")
    launcher: str = declare("local", "--launcher", suite=str, store=True, report=5,
                            help="how ranks start (default: {default}; mpirun with --comm mpi)")
    nproc_per_node: int = declare(1, "-n", "--nproc", option="nproc", type=int_list,
                                  action="append", suite=int, multi=6, help="ranks per node; "
                                  "a comma list such as 1,2,4 runs each (default {default})")
    nnodes: int = declare(1, "--nnodes", type=positive_int, suite=int, report=8, heading="nodes",
                          help="nodes of a multi-node run (default {default})")
    strategy: str = declare("ddp", "--strategy", suite=str, multi=7, newer=True,
                            help="how the run is distributed (dtbench list shows them); "
                            "repeatable (default {default})",
                            doc="how the run is distributed (repeatable; "
                            "[strategies](strategies.md))")
    # the strategy's options, validated and typed by the strategy, sorted by name
    strategy_options: tuple[tuple[str, Any], ...] = declare(
        (), "--strategy-opt", option="strategy_options", action="append", metavar="KEY=VALUE",
        help="an option of the strategy; repeatable (default: the strategy's own, "
        "dtbench list shows them)", suite=dict, key_default={})
    # (rank, factor): that rank's compute takes factor times as long (heterogeneity)
    straggler: tuple[int, float] | None = declare(
        None, "--straggler", metavar="RANK:FACTOR", suite=str, newer=True,
        help="that rank's compute takes FACTOR times as long, e.g. 1:3 (default: none)")
    straggler_work: str = declare(
        "idle", "--straggler-work", choices=STRAGGLER_WORK, suite=str, newer=True,
        help="what the straggler does for its extra time: idle (sleeps, as a slow or shared "
        "worker) or busy (computes, as a slower code path; its CPU time grows too); "
        "default {default}")
    speed_probe: bool = declare(
        False, "--speed-probe", action="store_true", suite=bool, newer=True,
        help="after each measured step, time a fixed matrix product on the rank's device and "
        "threads (outside the step): the machine's speed at that moment, the reference_time "
        "metric, which a gate can divide out; its cache traffic touches the steps, so it is "
        "part of the experiment (default off)")
    precision: str = declare("fp32", "--precision", choices=PRECISIONS, suite=str, multi=5,
                             store=True, baseline=True, report=6,
                             help="numeric precision (repeatable; default {default})")
    size: str = declare("small", "--size", choices=SIZES, suite=str, multi=2, store=True,
                        baseline=True, report=2,
                        help="workload preset (repeatable; default {default})")
    batch_per_rank: int = declare(
        0, "--batch-size", option="batch_size", type=int_list, action="append", suite=int,
        multi=8, report=10, heading="batch/rank",
        help="per rank; a comma list such as 8,16,32 runs each (a batch sweep, which "
        "`predict` fits its compute curve to; default: the workload preset's)")
    # large-batch training: workloads/optimizers.py
    optimizer: str = declare(
        "default", "--optimizer", choices=OPTIMIZERS, suite=str, newer=True,
        help="default (the workload's), lars (its SGD with a layer-wise trust ratio, You et al. "
        "2017) or lamb (Adam's moments with a layer-wise trust ratio, You et al. 2019)",
        doc="the workload's optimizer (default), LARS (its SGD with a layer-wise trust ratio "
        "η‖w‖/(‖g‖ + β‖w‖), You et al. 2017) or LAMB (Adam's moments with the trust ratio "
        "‖w‖/‖update‖, You et al. 2019); weight tensors get the ratio, biases and "
        "normalisation scales keep the global rate ([large-batch "
        "training](../guide/workloads.md#large-batch-training))")
    lr_scaling: str = declare(
        "none", "--lr-scaling", choices=LR_SCALINGS, suite=str, newer=True,
        help="the workload's learning rate times k (linear) or sqrt(k) for k = global batch / "
        "the workload's default batch; {default} (default) keeps it")
    warmup_epochs: float = declare(
        0.0, "--warmup-epochs", type=non_negative_float, suite=(int, float), newer=True,
        metavar="EPOCHS",
        help="time-to-train: ramp the learning rate linearly from rate/W to the rate over the "
        "first W steps, W = EPOCHS x steps per epoch (default {default}: none)")
    lars_eta: float = declare(
        LARS_ETA, "--lars-eta", type=positive_float, suite=(int, float), newer=True,
        metavar="ETA",
        help="LARS's trust coefficient: a weight tensor's rate is the global rate times ETA |w| "
        "/ (|g| + decay |w|) (default {default}, You et al.)")
    steps: int = declare(0, "--steps", type=positive_int, suite=int,
                         help="measure exactly N steps (default: until --target-ci, at least "
                         "the workload's count)")
    warmup: int = declare(0, "--warmup", type=non_negative_int, suite=int, minimum=0,
                          help="warm-up steps before measuring (default: the workload's)")
    # Measure until the 95% interval of the median step time is within this fraction of it
    # (steps is then the least count), or max_time seconds are spent; None: exactly `steps`.
    target_ci: float | None = declare(
        None, "--target-ci", type=positive_float, metavar="PCT", suite=(int, float),
        identity=False,
        help=f"throughput runs measure until the 95%% interval of the median step time is within "
        f"PCT%% of it (default {DEFAULT_TARGET_CI:g}) or --max-time is spent; --steps N "
        "measures exactly N steps instead",
        doc=f"a throughput run measures until the 95% interval of its median step time is "
        f"within PCT% (default {DEFAULT_TARGET_CI:g}), at least the workload's step count "
        "([how long a run measures](../guide/running.md#how-long-a-run-measures))")
    max_time: float | None = declare(
        None, "--max-time", type=positive_float, metavar="SECONDS", suite=(int, float),
        identity=False,
        help=f"time budget of a throughput run's measured steps (default {DEFAULT_MAX_TIME:g})")
    mode: str = declare("throughput", "--mode", choices=MODES, suite=str, store=True,
                        baseline=True, report=12,
                        help="throughput (speed) or ttt (train to the quality target); default "
                        "{default}")
    threads: int = declare(0, "--threads", type=positive_int, suite=int, minimum=0, report=9,
                           heading="threads/rank",
                           help="CPU threads per rank (default: on cpu the usable cores divided "
                           "by the ranks per node, on cuda torch's own)")
    seed: int = declare(0, "--seed", type=non_negative_int, suite=int, minimum=0,
                        identity=False,
                        help="random seed of parameters and data (default {default})")
    # whether the model is compiled; with compile_mode auto or default the runner settles it
    compile: bool = declare(False, "--compile", nargs="?", const="on", choices=COMPILE_MODES,
                            help=_COMPILE_HELP, suite=(bool, str),
                            doc="torch.compile ([the best CPU configuration]"
                            "(../guide/cpu-config.md))")
    # whether IPEX rewrites model and optimizer; with ipex_mode auto or default the runner
    # settles it
    ipex: bool = declare(False, "--ipex", choices=IPEX_MODES, help=_IPEX_HELP, suite=str,
                         newer=True,
                         doc="Intel Extension for PyTorch ([the best CPU configuration]"
                         "(../guide/cpu-config.md))")
    channels_last: bool = declare(
        True, "--no-channels-last", action="store_false", suite=bool,
        help="keep the default memory format for CNNs (default: channels-last)")
    peak: str = declare("in-run", "--peak", choices=PEAK_SOURCES, help=_PEAK_HELP, suite=str,
                        identity=False)
    profile: bool = declare(
        False, "--profile", action="store_true", suite=bool, identity=False,
        help="after the measured steps, profile --profile-steps more on every rank with "
        "torch.profiler: one trace per rank kept beside the record, and the time breakdown "
        "read from them (the profiled steps stay out of every figure)",
        doc="after the measured steps, `--profile-steps` more under torch.profiler on every "
        "rank: one Chrome/Perfetto trace per rank, gzipped, kept beside the record "
        "(`<store>/traces/<run id>/rank<N>.trace.json.gz`, named in `notes.traces`) and read "
        "into `time_breakdown`; the profiled steps stay out of every figure. Synchronous "
        "strategies in throughput mode only")
    profile_steps: int = declare(3, "--profile-steps", type=positive_int, suite=int,
                                 identity=False, metavar="N",
                                 help="steps profiled with --profile (default {default})")
    share_gpu: bool = declare(
        False, "--share-gpu", action="store_true", suite=bool, newer=True,
        help="let ranks on a node share a GPU (refused otherwise: NCCL cannot, and a board's "
        "energy and peak would count twice); each GPU's energy and peak then count once, MFU "
        "per GPU",
        doc="let ranks on a node share a GPU; without it a CUDA run with more ranks per node "
        "than visible GPUs is refused (exit 2: NCCL refuses two ranks on one device, and a "
        "shared board's energy and peak would count twice). With it, each GPU's energy and "
        "peak count once and MFU is per GPU (`peak_flops.extra.shared_devices`)")
    data: str | None = declare(
        None, "--data", suite=str,
        help="read samples from files: an image folder, WebDataset tar shards, HDF5 or a tokens "
        "file (dtbench data make), in throughput and time-to-train runs; .npz/.h5 arrays or "
        "text for time-to-train (default: none, synthetic samples)")
    loader_workers: int = declare(
        0, "--loader-workers", type=non_negative_int, suite=int, minimum=0, newer=True,
        heading="loader workers",
        help="DataLoader worker processes reading --data (default 0: the training loop reads)")
    skip_bad_samples: bool = declare(
        False, "--skip-bad-samples", action="store_true", suite=bool, newer=True,
        help="skip samples that cannot be read or decoded, counted in the record",
        doc="leave out samples that cannot be read or decoded, counted in "
        "`data_wait.skipped_samples` (default: the run fails naming the file)")
    # Fields the planner settles or derives; no option sets them directly.
    compile_mode: str = declare("off", identity=False)
    ipex_mode: str = declare("off", identity=False)
    # not in the key (published records keep theirs), but a quick-suite run is never pooled
    # with a scaling-suite one: apart
    suite: str | None = declare(None, identity=False, apart=True, store=True, report=14)
    env: tuple[tuple[str, str], ...] = declare(default_factory=tuple, identity=False)
    # data-parallel replicas that each take batch_per_rank samples a step (0: every rank);
    # set from the strategy when the spec is planned (pipeline stages share one batch)
    replicas: int = declare(0, identity=False)

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
        return spec_key(self.as_dict(), run_fields(type(self)))

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
        if values.get("strategy", KEY_DEFAULTS["strategy"]) == "ddp":
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
    launched from any node). Declared like RunSpec's fields: `dtbench run` takes each as an
    option, and an option not given leaves the default written here."""

    node_rank: int = declare(0, "--node-rank", type=non_negative_int, metavar="K",
                             help="this node's rank in a torchrun-style multi-node run (default "
                             "{default})")
    master_addr: str | None = declare(None, "--master-addr", metavar="HOST", help="rendezvous "
                                      "host (default 127.0.0.1 on one node, this host across "
                                      "nodes under mpirun/srun; torchrun across nodes needs it)")
    master_port: int = declare(0, "--master-port", type=positive_int, metavar="PORT",
                               help="rendezvous port (default a free one; as --master-addr)")
    hostfile: str | None = declare(None, "--hostfile", metavar="FILE",
                                   help="mpirun's hostfile for a multi-node MPI run (default none)")
    rank_timeout: float = declare(120.0, "--rank-timeout", type=positive_int, metavar="S",
                                  help="seconds without progress before a rank counts as hung "
                                  "(default {default})")
    comm_timeout: float = declare(600.0, "--comm-timeout", type=positive_int, metavar="S",
                                  help="seconds an NCCL collective may wait before NCCL's "
                                  "watchdog aborts the rank (default {default}, torch's); gloo "
                                  "and MPI ranks wait --rank-timeout")


# Options of a run that fill no spec field: ddp's, which older records kept as spec fields (and
# in their keys, at these values), and how often each combination runs.
OPTION_FIELDS: tuple[RunField, ...] = (
    RunField("bucket_mb", ("--bucket-mb",), type=positive_int, suite=int, spec=None,
             help="DDP bucket size in MiB (default 25)", strategy_option="ddp", key_default=25),
    RunField("compression", ("--compression",), choices=COMPRESSIONS, suite=str, spec=None,
             help="gradient compression hook for multi-rank runs (default none)",
             strategy_option="ddp", key_default="none"),
    RunField("repeat", ("--repeat",), type=positive_int, suite=int, spec=None, field_default=1,
             help="run each combination N times, round by round, each in fresh processes "
             "(default {default})"),
)
# Properties of a spec that records carry beside its fields (RunSpec.as_dict).
DERIVED_FIELDS: tuple[RunField, ...] = (
    RunField("world_size", store=True, store_type="bigint", report=7, heading="ranks"),
    RunField("global_batch", report=11),
)


@cache
def run_fields(spec: type[RunSpec] = RunSpec) -> tuple[RunField, ...]:
    """Every field of a run: the spec's declared fields in their order, the options that fill
    none, the derived ones, then where ranks start. Read off the classes when first asked, so a
    RunSpec subclass that declares a field gets a tuple with it."""
    return (*declared_fields(spec), *OPTION_FIELDS, *DERIVED_FIELDS,
            *(replace(f, launch=True) for f in declared_fields(LaunchOptions)))


def spec_defaults(spec: type[RunSpec] = RunSpec) -> dict[str, Any]:
    """Spec field -> the value a run gets where neither the command line nor a suite, nor the
    planner's reading of the workload and machine, sets it."""
    return field_defaults(declared_fields(spec))


RUN_FIELDS = run_fields()
# Spec fields newer than the first records, with the values that reproduce their keys.
KEY_DEFAULTS: dict[str, Any] = key_defaults(RUN_FIELDS)
# Options of the ddp strategy that older records kept as spec fields (and in their keys).
DDP_SPEC_OPTIONS = legacy_options(RUN_FIELDS, "ddp")
# Derived or descriptive fields that never make two runs different experiments.
NOT_IN_KEY = not_in_key(RUN_FIELDS)


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
