"""Refuse, before anything starts, a run the machine cannot hold: ranks x threads far beyond
the usable cores, or an estimated memory beyond the machine's. --oversubscribe lets it run."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import psutil

from harness.core.errors import UsageError
from harness.core.text import human_bytes
from harness.spec.specs import LaunchOptions, RunSpec

# Threads per usable core beyond which a run is refused (time-slicing, not a measurement).
MAX_THREADS_PER_CORE = 4
# Resident memory of one rank process before its model: Python, torch and its libraries
# (about 0.3 GB measured here; a round figure, stated as such in the refusal).
PROCESS_BYTES = 350 * 2**20


def usable_cores() -> int:
    return len(os.sched_getaffinity(0))


def available_memory() -> int:
    """Memory the ranks can have: what the kernel calls available, within a cgroup limit."""

    from harness.machine.hardware import read_cgroup_limits

    available = psutil.virtual_memory().available
    limit = read_cgroup_limits(Path("/sys")).get("memory_limit")
    return min(available, limit) if limit else available


def node_memory_estimate(spec: RunSpec) -> int:
    """Bytes the ranks of one node of `spec` take: per rank a process plus the training state
    and saved activations of its batch (workloads/memory.py)."""
    from workloads import get_workload
    from workloads.memory import training_bytes

    per_rank = PROCESS_BYTES
    if spec.backend == "cpu":  # on a GPU the model and activations live in device memory
        per_rank += training_bytes(get_workload(spec.workload), spec.size, spec.batch_per_rank)
    return spec.nproc_per_node * per_rank


def check_fits(spec: RunSpec, cores: int | None = None, memory: int | None = None) -> None:
    """UsageError, with the figures, when `spec` oversubscribes this machine."""
    cores = cores or usable_cores()
    memory = memory or available_memory()
    threads = spec.nproc_per_node * max(1, spec.threads)
    estimate = node_memory_estimate(spec)
    what = (f"{spec.nproc_per_node} rank(s) x {max(1, spec.threads)} thread(s) = {threads} "
            f"threads on {cores} usable core(s), about {human_bytes(estimate)} estimated for "
            f"{spec.workload}/{spec.size} batch {spec.batch_per_rank} "
            f"({human_bytes(PROCESS_BYTES)} a rank process + training state and activations) "
            f"against {human_bytes(memory)} available")
    if threads > MAX_THREADS_PER_CORE * cores:
        raise UsageError(f"{what}: more than {MAX_THREADS_PER_CORE} threads per core would "
                         "measure time-slicing; use fewer ranks, or add --oversubscribe to run "
                         "anyway")
    if estimate > memory:
        raise UsageError(f"{what}: the estimate exceeds the memory; use fewer ranks or a "
                         "smaller batch, or add --oversubscribe to run anyway")


def visible_gpus() -> int:
    """CUDA devices this process sees (0 without CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def check_gpus(spec: RunSpec, gpus: int | None = None) -> None:
    """UsageError when the GPU ranks of a node outnumber its GPUs, unless --share-gpu: NCCL
    refuses two ranks on one device, and a shared board's energy and peak would be counted
    once per rank."""
    if spec.backend != "cuda" or spec.share_gpu:
        return
    gpus = visible_gpus() if gpus is None else gpus
    if gpus and spec.nproc_per_node > gpus:
        from backends.cuda import shared_device_message

        raise UsageError(shared_device_message(spec.nproc_per_node, gpus))


def check_all(specs: list[RunSpec], oversubscribe: bool) -> None:
    """check_gpus for every planned spec; check_fits too (once per distinct placement),
    unless told not to."""
    for spec in specs:
        check_gpus(spec)
    if oversubscribe:
        return
    seen = set()
    for spec in specs:
        placement = (spec.workload, spec.size, spec.batch_per_rank, spec.nproc_per_node,
                     spec.threads)
        if placement not in seen:
            seen.add(placement)
            check_fits(spec)


def check_threads(ranks: int, threads: int, oversubscribe: bool) -> None:
    """The threads check alone, for tasks without a model (dtbench comm)."""
    cores = usable_cores()
    if not oversubscribe and ranks * threads > MAX_THREADS_PER_CORE * cores:
        raise UsageError(f"{ranks} rank(s) x {threads} thread(s) = {ranks * threads} threads on "
                         f"{cores} usable core(s): more than {MAX_THREADS_PER_CORE} threads per "
                         "core would measure time-slicing; use fewer ranks, or add "
                         "--oversubscribe to run anyway")


def check_rendezvous(spec: Any, launch: LaunchOptions) -> None:
    """UsageError, naming the options, for torchrun across nodes without --master-addr and
    --master-port: each node's dtbench would pick its own host name and a free port of its
    own, and every node would rendezvous with itself until the rank timeout. (mpirun and srun
    start every node's ranks from the first node, which picks both for all of them.)"""
    if spec.launcher != "torchrun" or spec.nnodes <= 1:
        return
    missing = [option for option, given in (("--master-addr", launch.master_addr),
                                             ("--master-port", launch.master_port)) if not given]
    if missing:
        raise UsageError(f"--launcher torchrun across {spec.nnodes} nodes needs "
                         f"{' and '.join(missing)}: the first node's address and a free port "
                         "on it, the same on every node (else each node would rendezvous with "
                         "itself)")


def rank_threads(spec: Any, cores: int | None = None) -> int | None:
    """The OpenMP threads of a rank (OMP_NUM_THREADS): --threads where given; for a GPU rank
    without it, the node's usable cores divided among its ranks (one per GPU), as srun's
    --cpus-per-task gives them (torchrun would otherwise set 1); None for a CPU run without
    --threads (torch's own default)."""
    if spec.threads:
        return int(spec.threads)
    if spec.backend != "cuda":
        return None
    return max(1, (cores or usable_cores()) // max(1, spec.nproc_per_node))
