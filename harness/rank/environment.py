"""Rank-side distributed set-up: identity from the launcher, process group, DDP, reporting.

Every launcher (dtbench's own spawner, torchrun, mpirun, srun) starts the same entry point,
`python -m harness.rank.main`; this module reads who the rank is from whichever launcher's
environment is present and reports progress and its status through the run directory.
"""
from __future__ import annotations

import datetime as dt
import os
import socket
import time
from dataclasses import dataclass
from typing import Any

import torch.distributed as dist

from harness.comm.meter import COUNTED, CommMeter, register_counted_backend
from harness.rundir import RankReport, RunDir


@dataclass(frozen=True)
class RankIdentity:
    """This process's place in the job."""

    rank: int
    world_size: int
    local_rank: int


def identity_from_env(environ: dict[str, str] | None = None) -> RankIdentity:
    """torchrun/dtbench (RANK...), Open MPI, MPICH/Hydra or Slurm variables, in that order."""
    from harness.comm.mpi_group import mpi_world_from_env

    env = dict(os.environ if environ is None else environ)
    if "RANK" in env and "WORLD_SIZE" in env:
        return RankIdentity(int(env["RANK"]), int(env["WORLD_SIZE"]),
                            int(env.get("LOCAL_RANK", "0")))
    return RankIdentity(*mpi_world_from_env(env))


def bind_device(spec: Any, who: RankIdentity) -> Any:
    """The rank's GPU, made current before the process group exists (NCCL binds a
    communicator to the current device), from its local rank under any launcher; None for
    CPU runs."""
    if spec.comm != "nccl" and getattr(spec, "backend", None) != "cuda":
        return None
    from backends.cuda import CUDABackend

    return CUDABackend().bind(who.local_rank, bool(getattr(spec, "share_gpu", False)))


def init_comm(spec: Any, who: RankIdentity, timeout_s: float,
              meter: CommMeter | None = None, device: Any = None,
              nccl_timeout_s: float | None = None) -> None:
    """Join the job's process group over the spec's communication backend; with a meter,
    through the counting wrapper of harness/comm/meter.py. NCCL gets the rank's device
    (`device_id`): its communicator is then created for that GPU; and its own timeout (its
    watchdog's, `nccl_timeout_s`), apart from the rendezvous' and gloo's (`timeout_s`, the
    rank timeout)."""
    store_timeout = dt.timedelta(seconds=timeout_s)
    timeout = dt.timedelta(seconds=nccl_timeout_s) \
        if spec.comm == "nccl" and nccl_timeout_s is not None else store_timeout
    backend = spec.comm
    if meter is not None and spec.comm in COUNTED:
        backend = register_counted_backend(spec.comm, meter, device)
    if spec.comm == "mpi":
        from harness.comm.mpi_group import init_mpi_process_group

        init_mpi_process_group(backend=backend if meter is not None else None)
        return
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        raise RuntimeError("MASTER_PORT is not set for a gloo/nccl rendezvous")
    bound = {"device_id": device} if spec.comm == "nccl" and device is not None else {}
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        # torchrun's agent already serves the rendezvous store; the ranks only join it.
        dist.init_process_group(backend=backend, init_method="env://", rank=who.rank,
                                world_size=who.world_size, timeout=timeout, **bound)
        return
    dist.init_process_group(backend=backend, store=rendezvous_store(who, store_timeout),
                            rank=who.rank, world_size=who.world_size, timeout=timeout,
                            **bound)


def rendezvous_store(who: RankIdentity, timeout: dt.timedelta) -> dist.TCPStore:
    """The TCP store of the rendezvous, served by rank 0 on MASTER_ADDR only.

    torch's own TCPStore listens on every interface; binding the socket ourselves keeps the
    one port dtbench opens on the address the user chose (127.0.0.1 for one node).
    """
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    if who.rank != 0:
        return dist.TCPStore(host, port, who.world_size, False, timeout=timeout)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.create_server((host, port), family=family, backlog=max(128, who.world_size))
    return dist.TCPStore(host, port, who.world_size, True, timeout=timeout,
                         master_listen_fd=listener.detach())


class RankReporter:
    """This rank's progress and final status, reported to the supervisor through the run
    directory; progress at most once per `min_interval_s`, and at the end of each phase."""

    def __init__(self, run_dir: RunDir, who: RankIdentity, min_interval_s: float = 1.0) -> None:
        self.run_dir = run_dir
        self.who = who
        self.min_interval_s = min_interval_s
        self._last = 0.0
        self.heartbeat("start", 0, 0, force=True)

    def heartbeat(self, phase: str, done: int, total: int, force: bool = False) -> None:
        now = time.time()
        if not force and now - self._last < self.min_interval_s and done != total:
            return
        self._last = now
        self.run_dir.write_heartbeat(self.who.rank, phase, done, total)

    def finish(self, status: str, error: str | None = None) -> None:
        self.run_dir.write_status(self.who.rank, status, error)


def gather_results(report: RankReport) -> list[RankReport] | None:
    """Every rank's report on every rank (all_gather_object); None outside a process group."""
    if not dist.is_initialized():
        return None
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, report)
    return gathered
