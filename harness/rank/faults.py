"""Faults injected on purpose (tests) and the checks that catch a broken run: divergence,
replicas that disagree."""
from __future__ import annotations

import math
import os
import signal
import time

import torch

from harness.core.errors import RunFailed
from harness.rundir import FAULT_VAR


def inject_fault(rank: int, step: int, model: torch.nn.Module | None = None) -> None:
    """Test hook: DTBENCH_FAULT="kill|hang|raise|oom|nan:RANK:STEP" misbehaves on purpose.

    Used by the fault-injection tests to prove that a dead or stuck rank ends the run in
    bounded time with a `failed` record naming it; unset, it costs one dict lookup a step.
    """
    fault = os.environ.get(FAULT_VAR)
    if not fault:
        return
    kind, _, where = fault.partition(":")
    if kind in TRAINING_FAULTS:
        return
    target_rank, _, target_step = where.partition(":")
    if int(target_rank or 0) != rank or int(target_step or 0) != step:
        return
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif kind == "hang":
        while True:
            time.sleep(60)
    elif kind == "raise":
        raise RuntimeError(f"injected fault at step {step}")
    elif kind == "oom":
        torch.empty(1 << 60, dtype=torch.uint8)  # a real allocation failure, not a mock
    elif kind == "nan" and model is not None:
        with torch.no_grad():  # the loss of this step, and the training after it, diverge
            next(model.parameters()).fill_(float("nan"))


# Test hooks for a run that trains another model than its spec says, every step on every rank
# (DTBENCH_FAULT=KIND[:VALUE]), so that `compare --trajectory` is shown to catch it:
# sum-gradients: ddp all-reduces the gradients without dividing by the ranks (their sum, not
# their mean); lr-times:F: the optimizer's learning rate times F.
TRAINING_FAULTS = ("sum-gradients", "lr-times")


def _allreduce_sum(process_group, bucket):  # type: ignore[no-untyped-def]
    # (no annotations: DDP rejects a hook whose `bucket` annotation is not dist.GradBucket)
    """DDP's allreduce hook without its division by the world size."""
    import torch.distributed as dist

    group = process_group if process_group is not None else dist.group.WORLD
    work = dist.all_reduce(bucket.buffer(), group=group, async_op=True)
    return work.get_future().then(lambda done: done.value()[0])


def mistrain(model: torch.nn.Module | None, optimizer: object) -> None:
    """Apply the training fault DTBENCH_FAULT asks for to a set-up strategy's model and
    optimizer (nothing when it asks for none)."""
    kind, _, value = os.environ.get(FAULT_VAR, "").partition(":")
    if kind == "lr-times":
        for group in getattr(optimizer, "param_groups", []):
            group["lr"] *= float(value)
    elif kind == "sum-gradients":
        ddp = getattr(model, "_orig_mod", model)
        if not isinstance(ddp, torch.nn.parallel.DistributedDataParallel):
            raise RuntimeError("DTBENCH_FAULT=sum-gradients needs a ddp run of several ranks")
        ddp.register_comm_hook(None, _allreduce_sum)


def parameter_checksum(model: torch.nn.Module) -> float:
    """Sum of all parameters in float64: equal across ranks when the replicas agree."""
    with torch.no_grad():
        return float(sum(p.detach().double().sum() for p in model.parameters()))


def check_finite(losses: list[float], first_step: int) -> None:
    for index, value in enumerate(losses):
        if not math.isfinite(value):
            raise RunFailed(f"diverged at step {first_step + index}: loss is {value}")
