"""Bare 4 MiB allreduce timing, the reference for `dtbench comm` (run under torchrun or mpirun).

`--api torch` times torch.distributed.all_reduce over gloo (launch with torchrun);
`--api mpi4py` times mpi4py's COMM_WORLD.Allreduce on a numpy buffer (launch with mpirun).
Rank 0 prints one JSON line: median of the slowest rank's time per iteration, and busbw.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--api", choices=("torch", "mpi4py"), required=True)
    parser.add_argument("--bytes", type=int, default=4 * 2**20)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    args = parser.parse_args()
    count = args.bytes // 4
    if args.api == "mpi4py":
        import numpy as np
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        buffer = np.ones(count, dtype=np.float32)

        def call() -> None:
            comm.Allreduce(MPI.IN_PLACE, buffer, op=MPI.SUM)

        def slowest(values: list[float]) -> list[float]:
            times = np.array(values)
            comm.Allreduce(MPI.IN_PLACE, times, op=MPI.MAX)
            return list(times)

        rank, size = comm.Get_rank(), comm.Get_size()
    else:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        dist.init_process_group("gloo")
        tensor = torch.ones(count)

        def call() -> None:
            dist.all_reduce(tensor)

        def slowest(values: list[float]) -> list[float]:
            times = torch.tensor(values, dtype=torch.float64)
            dist.all_reduce(times, op=dist.ReduceOp.MAX)
            return times.tolist()

        rank, size = dist.get_rank(), dist.get_world_size()
    for _ in range(args.warmup):
        call()
    times = []
    for _ in range(args.iters):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    median = statistics.median(slowest(times))
    if rank == 0:
        algbw = args.bytes / median / 1e9
        print(json.dumps({"api": args.api, "time_s": median, "algbw": algbw,
                          "busbw": algbw * 2 * (size - 1) / size}), flush=True)
    if args.api == "torch":
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
