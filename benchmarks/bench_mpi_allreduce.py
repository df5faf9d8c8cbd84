"""Allreduce through the mpi4py process group against bare mpi4py, on the same MPI.

Times in-place float32 `COMM_WORLD.Allreduce` and `dist.all_reduce` on the "mpi4py"
backend, each on two kinds of buffer: numpy's (which numpy backs with transparent huge
pages from 4 MiB up, where the kernel allows them on request) and torch's allocator's (as
DDP's gradient buckets are; huge pages only with THP_MEM_ALLOC_ENABLE=1). Same-buffer pairs
isolate the process group's own cost; numpy-vs-torch pairs show the memory's.

Paths are interleaved iteration by iteration so drift on a shared machine hits all alike.
An iteration's time is the slowest rank's; figures are medians after warmup, with
nccl-tests' algbw = bytes / time and busbw = algbw x 2(n-1)/n (GB/s, 1e9). Rank 0 prints
one JSON line per path, then the busbw ratios; asserts nothing (a benchmark).

    mpirun --allow-run-as-root --oversubscribe -n 2 python benchmarks/bench_mpi_allreduce.py
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch
import torch.distributed as dist

from harness.comm.mpi_group import init_mpi_process_group, mpi_library_version


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bytes", type=int, default=4 << 20)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)

    from mpi4py import MPI

    init_mpi_process_group()
    comm = MPI.COMM_WORLD
    world_size = comm.Get_size()
    elements = args.bytes // 4
    numpy_memory = torch.from_numpy(np.ones(elements, dtype=np.float32))
    torch_memory = torch.ones(elements, dtype=torch.float32)
    numpy_view, torch_view = numpy_memory.numpy(), torch_memory.numpy()
    paths: dict[str, Callable[[], object]] = {
        "mpi4py": lambda: comm.Allreduce(MPI.IN_PLACE, numpy_view, MPI.SUM),
        "dtbench_pg_numpy_buffer": lambda: dist.all_reduce(numpy_memory),
        "mpi4py_torch_buffer": lambda: comm.Allreduce(MPI.IN_PLACE, torch_view, MPI.SUM),
        "dtbench_pg": lambda: dist.all_reduce(torch_memory),
    }
    times: dict[str, list[float]] = {name: [] for name in paths}
    for iteration in range(args.warmup + args.iters):
        shift = iteration % len(paths)
        for name in [*paths][shift:] + [*paths][:shift]:
            comm.Barrier()
            start = time.perf_counter()
            paths[name]()
            elapsed = time.perf_counter() - start
            if iteration >= args.warmup:
                times[name].append(elapsed)
            # Keep the values small: repeated sums would grow them without bound.
            numpy_memory.fill_(1.0)
            torch_memory.fill_(1.0)

    slowest: dict[str, np.ndarray] = {}
    busbw: dict[str, float] = {}
    for name, samples in times.items():
        slowest[name] = np.asarray(samples)
        comm.Allreduce(MPI.IN_PLACE, slowest[name], MPI.MAX)
        median = statistics.median(slowest[name].tolist())
        algbw = args.bytes / median / 1e9
        busbw[name] = algbw * 2 * (world_size - 1) / world_size
        if comm.Get_rank() == 0:
            print(json.dumps({"path": name, "op": "allreduce", "bytes": args.bytes,
                              "world_size": world_size, "iters": args.iters,
                              "time_s_median": median, "time_s_min": float(slowest[name].min()),
                              "algbw": algbw, "busbw": busbw[name]}))
    if comm.Get_rank() == 0:
        pairs = {"same_numpy_buffer": ("dtbench_pg_numpy_buffer", "mpi4py"),
                 "same_torch_buffer": ("dtbench_pg", "mpi4py_torch_buffer"),
                 "pg_torch_buffer_vs_mpi4py_numpy_buffer": ("dtbench_pg", "mpi4py")}
        print(json.dumps({
            # busbw ratio of the medians, and the median of per-iteration ratios, which
            # pairs samples taken moments apart and so resists drift in machine load.
            "busbw_ratio_pg_over_mpi4py": {
                pair: {"of_medians": busbw[pg] / busbw[bare],
                       "paired": float(np.median(slowest[bare] / slowest[pg]))}
                for pair, (pg, bare) in pairs.items()},
            "mpi": mpi_library_version()}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
