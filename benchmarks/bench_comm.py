"""`dtbench comm` against bare collectives at 4 MiB, 2 ranks, side by side, alternating.

    python benchmarks/bench_comm.py --rounds 3

gloo: dtbench comm (torchrun) vs a bare torch.distributed loop (torchrun);
mpi: dtbench comm (mpirun, the mpi4py process group) vs bare mpi4py Allreduce (mpirun).
Prints busbw medians and ratios; asserts nothing (a benchmark).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BARE = str(ROOT / "benchmarks/bare_allreduce.py")


def mpirun() -> list[str]:
    path = shutil.which("mpirun") or "mpirun"
    extra = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    return [path, *extra, "--oversubscribe", "--bind-to", "none", "-n", "2"]


def bare(api: str, iters: int) -> float:
    launcher = ([sys.executable, "-m", "torch.distributed.run", "--standalone",
                 "--nproc-per-node", "2"] if api == "torch" else [*mpirun(), sys.executable])
    # Rank 0 prints its figure before teardown; an abort while tearing down does not void it.
    out = subprocess.run([*launcher, BARE, "--api", api, "--iters", str(iters)], check=False,
                         capture_output=True, text=True, timeout=300).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("{"))
    return float(json.loads(line)["busbw"])


def dtbench(comm: str, launcher: str, iters: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "comm.json"
        subprocess.run([sys.executable, "-m", "harness", "comm", "--comm", comm,
                        "--launcher", launcher, "-n", "2", "--op", "allreduce", "--sizes", "4M",
                        "--iters", str(iters), "--warmup", "10", "--out", tmp, "--json",
                        str(target), "-q"], check=True, capture_output=True, text=True,
                       cwd=ROOT, timeout=300)
        record = json.loads(target.read_text())[0]
        return next(m["value"] for m in record["metrics"] if m["name"] == "busbw")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--skip-mpi", action="store_true")
    parser.add_argument("--skip-gloo", action="store_true")
    args = parser.parse_args()
    variants: dict[str, Any] = {}
    if not args.skip_gloo:
        variants |= {"bare torch.distributed (gloo)": lambda: bare("torch", args.iters),
                     "dtbench comm --comm gloo": lambda: dtbench("gloo", "torchrun", args.iters)}
    if not args.skip_mpi:
        variants |= {"bare mpi4py Allreduce": lambda: bare("mpi4py", args.iters),
                     "dtbench comm --comm mpi": lambda: dtbench("mpi", "mpirun", args.iters)}
    results: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for round_index in range(args.rounds):
        # Odd rounds run the list backwards, so slow drifts of this shared host (its memory
        # bandwidth swings several-fold within minutes) do not favour either side.
        order = names if round_index % 2 == 0 else names[::-1]
        for name in order:
            results[name].append(variants[name]())
            print(f"round {round_index + 1}  {name:30s} busbw {results[name][-1]:7.3f} GB/s",
                  flush=True)
    print(f"\n4 MiB allreduce, 2 ranks, busbw over {args.rounds} rounds (median / best):")
    for name, values in results.items():
        print(f"  {name:30s} {statistics.median(values):7.3f} / {max(values):7.3f} GB/s")
    pairs = [] if args.skip_gloo else [("gloo", "dtbench comm --comm gloo",
                                        "bare torch.distributed (gloo)")]
    if not args.skip_mpi:
        pairs.append(("mpi", "dtbench comm --comm mpi", "bare mpi4py Allreduce"))
    for label, ours, reference in pairs:
        paired = [a / b for a, b in zip(results[ours], results[reference], strict=True)]
        print(f"{label:4s} dtbench/bare: ratio of medians "
              f"{statistics.median(results[ours]) / statistics.median(results[reference]):.3f}, "
              f"median of per-round ratios {statistics.median(paired):.3f}, "
              f"ratio of bests {max(results[ours]) / max(results[reference]):.3f}")

if __name__ == "__main__":
    main()
