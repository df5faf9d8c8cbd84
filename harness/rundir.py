"""The run directory: everything the supervisor and the ranks of one run tell each other.

The supervisor makes one private directory per run, starts each rank with its path
(`--run-dir`) and with the variables of RANK_VARIABLES, and removes it after the run. The spec
is written once, into the ranks' environment (SPEC_VAR): the environment is the one channel
that reaches every rank on every host under every launcher (torchrun and dtbench's own
spawner pass it on, mpirun forwards it with -x or -envlist, srun with --export=ALL), while
node 0's directory may not be visible on the other hosts; their ranks report into a local
directory of the same name. In the directory:

    heartbeat-R.json  rank R's progress (phase, steps done of total), rewritten as it goes
    status-R.json     rank R's final status (success, failed or skipped) and its error
    result.json       every rank's result, gathered over the process group by rank 0
    result-R.json     rank R's own result, in runs that tolerate lost workers (no gather)
    lost-R.json       a worker the supervisor booked as lost (its servers stop waiting on it)
    launcher-I.log    what the I-th process the supervisor started printed
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.core.files import write_atomic
from harness.spec.kinds import spec_of
from harness.spec.specs import PERF_ENV_PREFIXES, CommSpec, RunSpec

RUN_ID_VAR = "DTBENCH_RUN_ID"
SPEC_VAR = "DTBENCH_SPEC_JSON"
# Test hooks read by the ranks (harness/rank/faults.py).
FAULT_VAR = "DTBENCH_FAULT"
CHECK_SYNC_VAR = "DTBENCH_CHECK_SYNC"
# "1": the supervisor leaves the run directory behind, for debugging.
KEEP_VAR = "DTBENCH_KEEP_RUN_DIR"
# What ranks on other hosts need from the launching environment (mpirun -x / -envlist).
RANK_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", RUN_ID_VAR, SPEC_VAR, "OMP_NUM_THREADS",
                  "PYTHONPATH", "GLOO_SOCKET_IFNAME", "DTBENCH_MALLOC_TUNING", FAULT_VAR,
                  CHECK_SYNC_VAR)

def forwarded_variables(env: dict[str, str]) -> list[str]:
    """The names of `env` that ranks on other hosts get: RANK_VARIABLES and every variable
    that changes performance, the same set a record's `env` holds (PERF_ENV_PREFIXES: NCCL's
    algorithms and transports, CUDA's visibility and allocator, OpenMP, oneDNN, MKL, gloo,
    the MPI libraries' own), as set where dtbench runs (mpirun's -x, MPICH's -envlist)."""
    names = [name for name in RANK_VARIABLES if name in env]
    return names + sorted(name for name in env if name.startswith(PERF_ENV_PREFIXES)
                          and name not in names)

STATUSES = ("success", "failed", "skipped")

Task = RunSpec | CommSpec


def spec_environment(spec: Task, run_id: str) -> dict[str, str]:
    """The variables that carry the run's identity and its spec to every rank."""
    return {RUN_ID_VAR: run_id, SPEC_VAR: json.dumps(spec.as_dict())}


def read_spec(environ: dict[str, str] | None = None) -> Task:
    """The spec the supervisor gave this rank."""
    environ = dict(os.environ if environ is None else environ)
    if SPEC_VAR not in environ:
        raise RuntimeError(f"{SPEC_VAR} is not set: ranks are started by the dtbench supervisor")
    return spec_of(json.loads(environ[SPEC_VAR]))


@dataclass
class RankResult:
    """Raw measurements of one training rank; JSON-serialisable so ranks in other processes
    can report them; turning them into metrics is the collectors' job."""

    rank: int
    world_size: int
    device_name: str
    settings: dict[str, Any]
    step_times: list[float] = field(default_factory=list)
    # The process's CPU seconds over each measured step (all its threads), where the timer
    # reads them (the host's: harness/collectors/timing.py `cpu_time`)
    step_cpu_times: list[float] = field(default_factory=list)
    # --speed-probe: the seconds of the fixed probe timed after each measured step
    probe_times: list[float] = field(default_factory=list)
    # Seconds of each warm-up step (the first holds compilation and IPEX's first rewrite)
    warmup_times: list[float] = field(default_factory=list)
    # Measured steps left out as not yet settled (harness/rank/adaptive), before step_times
    settling_times: list[float] = field(default_factory=list)
    # How the run decided its length (harness/rank/adaptive.summary; rank 0's decision)
    measurement: dict[str, Any] = field(default_factory=dict)
    losses: list[float] = field(default_factory=list)
    peak_memory: int | None = None
    # Memory figures beside the allocated peak (a GPU's reserved peak and NVML's in-use bytes)
    memory: dict[str, int | None] = field(default_factory=dict)
    # The physical device the rank ran on (a GPU's UUID), where ranks could share one
    device_key: str | None = None
    energy_joules: float | None = None
    energy_reason: str | None = None
    # The energy by domain (a GPU's UUID, a host's package or DRAM zone), the seconds and the
    # steps between the two readings, and what the counter covers
    energy_domains: dict[str, float] = field(default_factory=dict)
    energy_window_s: float | None = None
    energy_steps: int | None = None
    energy_covers: str | None = None
    # --profile: the profiled steps' Chrome trace, gzipped and base64 (written beside the
    # record by the process that writes it, then dropped from here)
    trace: str | None = None
    quality: dict[str, float] | None = None
    quality_history: list[dict[str, Any]] = field(default_factory=list)
    target_reached: bool | None = None
    time_to_train: float | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    # Bytes this rank put on the wire in each measured step, by kind, and the payload it handed
    # to the collectives in each (counted, harness/comm/meter)
    comm_bytes: list[dict[str, int]] = field(default_factory=list)
    comm_payload: list[int] = field(default_factory=list)
    # Traffic outside the training steps by phase (setup, evaluation, stop decision, ...):
    # {"payload": bytes, "wire": bytes}
    comm_outside: dict[str, dict[str, int]] = field(default_factory=dict)
    # Seconds per phase (forward, backward, exchange, optimizer, ...) of each measured step
    phase_times: list[dict[str, float]] = field(default_factory=list)
    # Bytes of parameters, gradients and optimizer state this rank holds after the steps
    state_bytes: dict[str, int] = field(default_factory=dict)
    role: str = "worker"
    strategy_stats: dict[str, Any] = field(default_factory=dict)
    param_checksums: list[float] = field(default_factory=list)
    # In-run peak readings of this rank's device: {"when", "flops", "memory_bandwidth", ...}.
    peak_readings: list[dict[str, Any]] = field(default_factory=list)
    # What NCCL chose for this rank, from its own debug output (harness/comm/nccl_log.py).
    nccl: dict[str, Any] | None = None
    # This node's fingerprint summary, from the first rank of each node of a multi-node run.
    node: dict[str, Any] | None = None
    # Where the batches came from when --data files fed the run (harness/rank/feed.py): the
    # format, loader workers, seconds waited for each measured step's batch, samples read.
    data: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RankResult:
        return cls(**data)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# What a rank reports: a training rank its RankResult, a `dtbench comm` rank its timings.
RankReport = RankResult | dict[str, Any]


def _document(report: RankReport) -> dict[str, Any]:
    return report.as_dict() if isinstance(report, RankResult) else report


@dataclass
class RankState:
    """What the run directory says about one rank: its last heartbeat and final status."""

    rank: int
    pid: int | None = None
    phase: str = "starting"
    done: int = 0
    total: int = 0
    beat: float = 0.0
    status: str | None = None
    error: str | None = None
    host: str | None = None
    ended: float | None = None  # when the rank wrote its final status (time.time())


@dataclass(frozen=True)
class LostWorker:
    """A worker whose death a tolerant run survives: when it went, and how far it got."""

    rank: int
    role: str
    time: float
    steps: int
    phase: str | None
    reason: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class RunDir:
    """The files of one run's directory, each written and read here only."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    @classmethod
    def create(cls, run_id: str) -> RunDir:
        """A fresh private directory for a run that starts now (the supervisor's side)."""
        return cls(Path(tempfile.mkdtemp(prefix=f"dtbench-{run_id}-")))

    @classmethod
    def join(cls, path: str | Path) -> RunDir:
        """The directory a rank was told to report to, made where this host lacks it."""
        run_dir = cls(Path(path))
        run_dir.path.mkdir(parents=True, exist_ok=True)
        return run_dir

    def remove(self) -> None:
        """Delete the directory after the run, unless KEEP_VAR asks to keep it."""
        if os.environ.get(KEEP_VAR) != "1":
            shutil.rmtree(self.path, ignore_errors=True)

    def _write(self, name: str, payload: Any, durable: bool = False) -> None:
        write_atomic(self.path / name, json.dumps(payload), durable=durable)

    def _read(self, path: Path) -> Any:
        """A file's JSON, or None while it is absent or half-seen."""
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    @staticmethod
    def _rank_of(path: Path) -> int:
        return int(path.stem.rpartition("-")[2])

    # -- progress and final status (rank -> supervisor) --------------------------------------
    def write_heartbeat(self, rank: int, phase: str, done: int, total: int) -> None:
        self._write(f"heartbeat-{rank}.json",
                    {"rank": rank, "pid": os.getpid(), "phase": phase, "done": done,
                     "total": total, "time": time.time(), "host": socket.gethostname()})

    def write_status(self, rank: int, status: str, error: str | None = None) -> None:
        if status not in STATUSES:
            raise ValueError(f"rank status {status!r}; choose from {', '.join(STATUSES)}")
        self._write(f"status-{rank}.json",
                    {"rank": rank, "status": status, "error": error, "time": time.time()})

    def rank_states(self) -> dict[int, RankState]:
        """Every rank that has reported so far, by rank."""
        states: dict[int, RankState] = {}
        for path in self.path.glob("heartbeat-*.json"):
            beat = self._read(path)
            if isinstance(beat, dict):
                states[beat["rank"]] = RankState(beat["rank"], beat.get("pid"), beat["phase"],
                                                 beat["done"], beat["total"], beat["time"],
                                                 host=beat.get("host"))
        for path in self.path.glob("status-*.json"):
            final = self._read(path)
            if not isinstance(final, dict):
                continue
            state = states.setdefault(final["rank"], RankState(final["rank"]))
            state.status, state.error = final["status"], final.get("error")
            ended = final.get("time")
            state.ended = float(ended) if isinstance(ended, (int, float)) else None
        return states

    # -- results (rank -> supervisor) --------------------------------------------------------
    def result_path(self, rank: int | None = None) -> Path:
        """result.json (every rank, gathered by rank 0), or result-R.json (rank R's own)."""
        return self.path / ("result.json" if rank is None else f"result-{rank}.json")

    def write_results(self, reports: list[RankReport]) -> None:
        """Rank 0: every rank's report, gathered over the process group."""
        self._write(self.result_path().name, [_document(r) for r in reports], durable=True)

    def write_own_result(self, rank: int, report: RankReport) -> None:
        """A rank of a run that may lose workers, which cannot gather: its own report."""
        self._write(self.result_path(rank).name, _document(report), durable=True)

    def has_results(self) -> bool:
        return self.result_path().exists()

    def read_results(self) -> list[dict[str, Any]] | None:
        """The gathered reports, None when rank 0 wrote none."""
        if not self.has_results():
            return None
        return list(json.loads(self.result_path().read_text()))

    def read_own_results(self) -> list[dict[str, Any]]:
        """The ranks' own reports, by rank."""
        paths = sorted(self.path.glob("result-*.json"), key=self._rank_of)
        return [json.loads(path.read_text()) for path in paths]

    # -- lost workers (supervisor -> servers) ------------------------------------------------
    def write_lost(self, lost: LostWorker) -> None:
        self._write(f"lost-{lost.rank}.json", lost.as_dict())

    def lost_workers(self) -> list[LostWorker]:
        """The workers the supervisor booked as lost so far."""
        found = [self._read(path) for path in self.path.glob("lost-*.json")]
        return [LostWorker(**entry) for entry in found if isinstance(entry, dict)]

    # -- what the launched processes printed -------------------------------------------------
    def launcher_log(self, index: int) -> Path:
        """Where the output of the index-th process the supervisor starts goes."""
        return self.path / f"launcher-{index}.log"

    def launcher_logs(self) -> list[Path]:
        """The launcher logs, in the order their processes were started."""
        return sorted(self.path.glob("launcher-*.log"), key=self._rank_of)
