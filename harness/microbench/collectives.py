"""`dtbench comm`: collective microbenchmarks in the manner of nccl-tests.

Sizes are total buffer bytes as nccl-tests counts them (the allgather output, the
reducescatter input). For each op and size every rank times `iters` calls after `warmup`;
an iteration takes as long as its slowest rank; the median iteration gives
algbw = bytes / time and busbw = algbw x (2(n-1)/n for allreduce, (n-1)/n for allgather and
reducescatter, 1 for broadcast), in GB/s (1e9).
"""
from __future__ import annotations

import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from harness.core.errors import UsageError
from harness.facts.traffic import busbw_factor
from harness.spec.specs import CommSpec

OPS = ("allreduce", "allgather", "reducescatter", "broadcast")
UNITS = {"": 1, "B": 1, "K": 2**10, "M": 2**20, "G": 2**30}
MAX_BYTES = 4 * 2**30



def parse_size(text: str) -> int:
    """Bytes from '4096', '4K', '4M', '1G' (also '4KiB', '4MB'); UsageError otherwise."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)(?:i?B)?\s*", text, re.IGNORECASE | re.ASCII)
    if not match:
        raise UsageError(f"--sizes: cannot read {text!r}; use bytes with an optional K, M or G "
                         "suffix, e.g. 4M")
    digits = match.group(1).lstrip("0") or "0"
    if len(digits) > 12:  # int() refuses more than 4300 digits; 12 is far past 4G anyway
        raise UsageError(f"--sizes: a {len(digits)}-digit size is outside 4 B .. 4G")
    value = int(digits) * UNITS[match.group(2).upper()]
    if value < 4 or value > MAX_BYTES:
        raise UsageError(f"--sizes: {text!r} is outside 4 B .. 4G")
    return value


def parse_sizes(text: str) -> tuple[int, ...]:
    """'1K:64M' (every power of two between), '4M', or a comma list of either."""
    sizes: list[int] = []
    for part in text.split(","):
        if ":" in part:
            low_text, _, high_text = part.partition(":")
            low, high = parse_size(low_text), parse_size(high_text)
            if low > high:
                raise UsageError(f"--sizes: range {part!r} runs backwards")
            uneven = [t for t, v in ((low_text, low), (high_text, high)) if v & (v - 1)]
            if uneven:
                raise UsageError(f"--sizes: range {part!r}: {uneven[0].strip()!r} is not a "
                                 "power of two; ranges go by powers of two, e.g. 1K:64M "
                                 "(list other sizes with commas)")
            size = low
            while size <= high:
                sizes.append(size)
                size *= 2
        else:
            sizes.append(parse_size(part))
    return tuple(sorted(set(sizes)))


def parse_ops(text: str) -> tuple[str, ...]:
    ops = tuple(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))
    unknown = [op for op in ops if op not in OPS]
    if unknown or not ops:
        raise UsageError(f"--op: unknown collective {unknown[0] if unknown else text!r}; "
                         f"choose from: {', '.join(OPS)}")
    return ops


def _buffer(count: int, value: float, device: torch.device) -> torch.Tensor:
    """A float32 buffer; on the CPU allocated by numpy, which asks the kernel for transparent
    huge pages on large arrays (torch's allocator does not). MPI's shared-memory copies run
    up to 1.5x faster on them, and bare mpi4py/numpy benchmarks use the same memory."""
    if device.type == "cpu":
        import numpy as np

        return torch.from_numpy(np.full(count, value, dtype=np.float32))
    return torch.full((count,), value, device=device)


def _collective(op: str, nbytes: int, world: int, rank: int,
                device: torch.device) -> Callable[[], Any]:
    import torch.distributed as dist

    count = max(world, nbytes // 4)
    count -= count % world
    if op == "allreduce":
        buffer = _buffer(count, 1.0, device)
        return lambda: dist.all_reduce(buffer)
    if op == "broadcast":
        buffer = _buffer(count, 1.0, device)
        return lambda: dist.broadcast(buffer, src=0)
    if op == "allgather":
        output = _buffer(count, 0.0, device)
        shard = _buffer(count // world, float(rank), device)
        return lambda: dist.all_gather_into_tensor(output, shard)
    full = _buffer(count, 1.0, device)
    out = _buffer(count // world, 0.0, device)
    return lambda: dist.reduce_scatter_tensor(out, full)


def run_collectives(spec: CommSpec, rank: int, world: int, device: torch.device,
                    progress: Callable[[str, int, int], None]) -> dict[str, Any]:
    """This rank's per-iteration times for every op and size (rank side)."""
    import torch.distributed as dist

    total = len(spec.ops) * len(spec.sizes)
    timings = []
    # the rank's own GPU: a bare synchronize() waits for cuda:0, the current device of none
    # but rank 0, and ranks >= 1 would time kernel launches
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" \
        else (lambda: None)
    for index, (op, nbytes) in enumerate((o, s) for o in spec.ops for s in spec.sizes):
        call = _collective(op, nbytes, world, rank, device)
        for _ in range(spec.warmup):
            call()
        sync()
        dist.barrier()
        times = []
        for _ in range(spec.iters):
            start = time.perf_counter()
            call()
            sync()
            times.append(time.perf_counter() - start)
        timings.append({"op": op, "bytes": nbytes, "times": times})
        progress(f"{op}", index + 1, total)
    return {"rank": rank, "timings": timings}


@dataclass(frozen=True)
class CommResult:
    """One op at one size, folded over ranks."""

    op: str
    bytes: int
    time_s: float
    algbw: float
    busbw: float
    samples_busbw: list[float]


def fold(spec: CommSpec, ranks: list[dict[str, Any]]) -> list[CommResult]:
    """Per iteration the slowest rank's time; the median over iterations gives the bandwidth."""
    results = []
    for entry_index, entry in enumerate(ranks[0]["timings"]):
        per_rank = [r["timings"][entry_index]["times"] for r in ranks]
        slowest = [max(values) for values in zip(*per_rank, strict=True)]
        median = statistics.median(slowest)
        factor = busbw_factor(entry["op"], spec.world_size)
        algbw = entry["bytes"] / median / 1e9
        results.append(CommResult(entry["op"], entry["bytes"], median, algbw, algbw * factor,
                                  [entry["bytes"] / t / 1e9 * factor for t in slowest]))
    return results
