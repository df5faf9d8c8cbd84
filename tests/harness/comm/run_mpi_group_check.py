"""Checks the mpi4py process group end to end; run it under mpirun with two or more ranks.

Each collective's result is compared with what the ranks' inputs imply, then a small MLP
is trained with DistributedDataParallel on rank-dependent data. After every step the
parameters must be bitwise equal on all ranks (compared through mpi4py directly, not
through the group under test), match a single-process replay of the averaged-gradient
update, and differ from training without communication: MPI carried the gradients.
Rank 0 prints a JSON summary as the last line; the exit status is 1 on any mismatch.

    mpirun --allow-run-as-root --oversubscribe -n 2 python tests/harness/comm/run_mpi_group_check.py
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from harness.comm.mpi_group import init_mpi_process_group, mpi_library_version

FEATURES, HIDDEN, CLASSES, BATCH = 256, 512, 10, 8
LR = 0.05


def collective_checks(rank: int, world_size: int) -> dict[str, Callable[[], bool]]:
    """Named checks of each collective's numbers against the ranks' known inputs."""
    ranks = torch.arange(world_size, dtype=torch.float32)
    base = torch.arange(6, dtype=torch.float32)

    def contribution(r: int | torch.Tensor) -> torch.Tensor:
        return base * (r + 1) + r

    every = torch.stack([contribution(r) for r in range(world_size)])
    mine = contribution(rank)

    def allreduce(op: dist.ReduceOp, expected: torch.Tensor,
                  dtype: torch.dtype = torch.float32) -> bool:
        tensor = mine.to(dtype, copy=True)
        dist.all_reduce(tensor, op=op)
        return tensor.dtype == dtype and torch.equal(tensor, expected.to(dtype))

    def allreduce_strided() -> bool:
        matrix = torch.zeros(3, 4)
        matrix[:, ::2] = rank + 1.0
        column_view = matrix[:, ::2]
        dist.all_reduce(column_view)
        total = world_size * (world_size + 1) / 2
        return bool((matrix[:, ::2] == total).all() and (matrix[:, 1::2] == 0).all())

    def allreduce_ints() -> bool:
        counts = torch.tensor([rank, 1], dtype=torch.int64)
        flags = torch.tensor([rank == 0, True, False])
        dist.all_reduce(counts)
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        return (counts.tolist() == [int(ranks.sum()), world_size]
                and flags.tolist() == [True, True, False])

    def allreduce_async() -> bool:
        tensor = mine.clone()
        work = dist.all_reduce(tensor, async_op=True)
        done = work.wait()
        value = work.get_future().value()
        return (done is True and work.is_completed() and torch.equal(value[0], tensor)
                and torch.equal(tensor, every.sum(0)))

    def broadcast(dtype: torch.dtype) -> bool:
        root = world_size - 1
        tensor = mine.to(dtype, copy=True)
        dist.broadcast(tensor, src=root)
        return torch.equal(tensor, contribution(root).to(dtype))

    def all_gather_list() -> bool:
        outputs = [torch.empty_like(mine) for _ in range(world_size)]
        dist.all_gather(outputs, mine)
        return torch.equal(torch.stack(outputs), every)

    def all_gather_strided() -> bool:
        matrix = torch.stack([mine, -mine], dim=1)
        output = torch.empty(world_size * mine.numel())
        dist.all_gather_single(output, matrix[:, 0])
        return torch.equal(output, every.reshape(-1))

    def all_gather_single() -> bool:
        output = torch.empty(world_size * mine.numel())
        dist.all_gather_single(output, mine)
        return torch.equal(output, every.reshape(-1))

    def reduce_scatter_list(op: dist.ReduceOp, divisor: int) -> bool:
        chunks = [mine + 100.0 * r for r in range(world_size)]
        output = torch.empty_like(mine)
        dist.reduce_scatter(output, chunks, op=op)
        return torch.equal(output, (every.sum(0) + 100.0 * rank * world_size) / divisor)

    def reduce_scatter_single(dtype: torch.dtype) -> bool:
        source = torch.cat([mine + 100.0 * r for r in range(world_size)]).to(dtype)
        output = torch.empty(mine.numel(), dtype=dtype)
        dist.reduce_scatter_single(output, source)
        expected = (every.sum(0) + 100.0 * rank * world_size).to(dtype)
        return torch.equal(output, expected)

    def barrier() -> bool:
        dist.barrier()
        return True

    sum_, avg = dist.ReduceOp.SUM, dist.ReduceOp.AVG
    return {
        "allreduce_sum_fp32": lambda: allreduce(sum_, every.sum(0)),
        "allreduce_avg_fp32": lambda: allreduce(avg, every.sum(0) / world_size),
        "allreduce_max_fp32": lambda: allreduce(dist.ReduceOp.MAX, every.amax(0)),
        "allreduce_min_fp32": lambda: allreduce(dist.ReduceOp.MIN, every.amin(0)),
        "allreduce_sum_bf16": lambda: allreduce(sum_, every.sum(0), torch.bfloat16),
        "allreduce_avg_bf16": lambda: allreduce(avg, every.sum(0) / world_size,
                                                torch.bfloat16),
        "allreduce_sum_fp16": lambda: allreduce(sum_, every.sum(0), torch.float16),
        "allreduce_strided": allreduce_strided,
        "allreduce_int_bool": allreduce_ints,
        "allreduce_async_work": allreduce_async,
        "broadcast_fp32": lambda: broadcast(torch.float32),
        "broadcast_bf16": lambda: broadcast(torch.bfloat16),
        "all_gather": all_gather_list,
        "all_gather_single": all_gather_single,
        "all_gather_strided_input": all_gather_strided,
        "reduce_scatter_sum": lambda: reduce_scatter_list(sum_, 1),
        "reduce_scatter_avg": lambda: reduce_scatter_list(avg, world_size),
        "reduce_scatter_single_fp32": lambda: reduce_scatter_single(torch.float32),
        "reduce_scatter_single_bf16": lambda: reduce_scatter_single(torch.bfloat16),
        "barrier": barrier,
    }


def make_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN),
                         nn.ReLU(), nn.Linear(HIDDEN, CLASSES))


def batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1000 * step + rank)
    return (torch.randn(BATCH, FEATURES, generator=generator),
            torch.randint(0, CLASSES, (BATCH,), generator=generator))


def flat_parameters(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def sgd_step(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> None:
    model.zero_grad(set_to_none=True)
    nn.functional.cross_entropy(model(inputs), targets).backward()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter -= LR * parameter.grad


def ddp_training(comm: Any, rank: int, world_size: int, steps: int,
                 init_sync: bool) -> dict[str, Any]:
    """Train with DDP; compare every step with the other ranks, a replay and a solo run."""
    from mpi4py import MPI

    # With init_sync the ranks start apart and DDP's broadcast must align them.
    model = make_model(seed=rank if init_sync else 0)
    ddp = nn.parallel.DistributedDataParallel(model, init_sync=init_sync, bucket_cap_mb=1)
    replay = make_model(seed=0)
    solo = make_model(seed=0)
    result: dict[str, Any] = {"init_sync": init_sync, "steps": steps,
                              "identical_across_ranks": True, "max_diff_to_replay": 0.0,
                              "min_diff_to_solo": float("inf")}
    for step in range(steps):
        inputs, targets = batch(rank, step)
        sgd_step(ddp, inputs, targets)
        # Replay: the mean of the ranks' gradients, which is what allreduce(AVG) yields.
        replay.zero_grad(set_to_none=True)
        for other in range(world_size):
            other_inputs, other_targets = batch(other, step)
            loss = nn.functional.cross_entropy(replay(other_inputs), other_targets)
            (loss / world_size).backward()
        with torch.no_grad():
            for parameter in replay.parameters():
                parameter -= LR * parameter.grad
        sgd_step(solo, inputs, targets)

        mine = flat_parameters(model)
        gathered = torch.empty(world_size, mine.numel())
        comm.Allgather(mine.numpy(), gathered.numpy())
        identical = all(torch.equal(gathered[0], row) for row in gathered)
        result["identical_across_ranks"] &= bool(comm.allreduce(identical, op=MPI.LAND))
        result["max_diff_to_replay"] = max(
            result["max_diff_to_replay"], (mine - flat_parameters(replay)).abs().max().item())
        result["min_diff_to_solo"] = min(
            result["min_diff_to_solo"], (mine - flat_parameters(solo)).abs().max().item())
    # DDP rebuilds its buckets after the first step; with bucket_cap_mb=1 there are several.
    result["buckets"] = len(ddp.reducer._get_zeros_like_grad_buckets())
    # Every rank agrees on the worst case, so they all reach the same verdict.
    result["max_diff_to_replay"] = comm.allreduce(result["max_diff_to_replay"], op=MPI.MAX)
    result["min_diff_to_solo"] = comm.allreduce(result["min_diff_to_solo"], op=MPI.MIN)
    result["ok"] = bool(result["identical_across_ranks"]
                        and result["max_diff_to_replay"] < 1e-5
                        and result["min_diff_to_solo"] > 1e-4)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)

    from mpi4py import MPI

    init_mpi_process_group()
    rank, world_size = dist.get_rank(), dist.get_world_size()
    comm = MPI.COMM_WORLD
    collectives: dict[str, bool | str] = {}
    for name, check in collective_checks(rank, world_size).items():
        try:
            passed = bool(check())
        except Exception as exc:  # noqa: BLE001 - reported per check, every rank goes on
            passed = False
            collectives[name] = f"{type(exc).__name__}: {exc}"
        else:
            collectives[name] = passed
        if not comm.allreduce(passed, op=MPI.LAND) and collectives[name] is True:
            collectives[name] = "failed on another rank"
    ddp = [ddp_training(comm, rank, world_size, args.steps, init_sync)
           for init_sync in (False, True)]
    ok = all(v is True for v in collectives.values()) and all(run["ok"] for run in ddp)
    summary = {"ok": ok, "world_size": world_size, "backend": dist.get_backend(),
               "mpi": mpi_library_version(), "collectives": collectives, "ddp": ddp}
    dist.destroy_process_group()
    if rank == 0:
        print(json.dumps(summary), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
