"""Harness overhead: `dtbench run` against a bare hand-written loop, side by side.

Both train ResNet-50 (full size) at the same batch, precision and threads, in fresh
processes, interleaved round by round so drift on a shared machine hits all equally. The
cpu backend tunes glibc's allocator, so each side runs with and without that tuning:
dtbench/bare at equal settings is the harness's own overhead, and dtbench (default) over
the plain bare loop is what a user sees. Prints figures; asserts nothing (a benchmark).

With --mfu each round first measures the GEMM peak afresh (into a private cache that the
dtbench runs of that round then use), and every variant's MFU is taken against it: on a
shared host the GEMM rate drifts by a third within hours, so a peak cached in a slow hour
would flatter MFU and one cached in a fast hour would understate it.

    python benchmarks/bench_overhead.py --rounds 2 --steps 20
    python benchmarks/bench_overhead.py --precision bf16 --batch-size 32 --steps 8 --mfu
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def bare(args: argparse.Namespace, tuned: bool) -> float:
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/bare_loop.py"), "--batch-size",
         str(args.batch_size), "--steps", str(args.steps), "--warmup", str(args.warmup),
         "--threads", str(args.threads), "--precision", args.precision,
         *(["--malloc-tuning"] if tuned else [])],
        check=True, capture_output=True, text=True).stdout
    return float(json.loads(out.strip().splitlines()[-1])["throughput"])


def fresh_peak(args: argparse.Namespace, cache: Path) -> float:
    """The GEMM peak measured now by `dtbench peak`, kept in `cache` for this round's runs."""
    out = subprocess.run(
        [sys.executable, "-m", "harness", "peak", "--precision", args.precision,
         "--threads", str(args.threads), "--json", "-"],
        check=True, capture_output=True, text=True, cwd=ROOT,
        env={**os.environ, "DTBENCH_CACHE_DIR": str(cache)}).stdout
    return float(json.loads(out)["flops"])


def harness(args: argparse.Namespace, tuned: bool) -> float:
    env = {**os.environ, "DTBENCH_MALLOC_TUNING": "1" if tuned else "0"}
    if args.peak_cache is not None:
        env["DTBENCH_CACHE_DIR"] = str(args.peak_cache)
    with tempfile.TemporaryDirectory() as tmp:
        records = Path(tmp) / "records.json"
        subprocess.run(
            [sys.executable, "-m", "harness", "run", "-w", "resnet50", "--size", "full",
             "--batch-size", str(args.batch_size), "--precision", args.precision,
             "--steps", str(args.steps), "--warmup", str(args.warmup),
             "--threads", str(args.threads), "--out", tmp, "--json", str(records), "-q"],
            check=True, capture_output=True, text=True, cwd=ROOT, env=env)
        record = json.loads(records.read_text())[0]
        if record["status"] != "success":
            raise SystemExit(f"harness run {record['status']}: {record['error']}")
        return next(m["value"] for m in record["metrics"] if m["name"] == "throughput")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--mfu", action="store_true",
                        help="measure the GEMM peak afresh each round and print MFU against it")
    args = parser.parse_args()
    args.peak_cache = None
    flops_per_sample = 0.0
    if args.mfu:
        from workloads import get_workload

        flops_per_sample = float(get_workload("resnet50").describe("full")["flops_per_sample"])
    peaks: list[float] = []
    mfus: dict[str, list[float]] = {}
    variants = {
        "bare (plain)": lambda: bare(args, tuned=False),
        "dtbench (DTBENCH_MALLOC_TUNING=0)": lambda: harness(args, tuned=False),
        "bare (+allocator tuning)": lambda: bare(args, tuned=True),
        "dtbench (default)": lambda: harness(args, tuned=True),
    }
    results: dict[str, list[float]] = {name: [] for name in variants}
    for round_index in range(args.rounds):
        with tempfile.TemporaryDirectory() as cache:
            if args.mfu:
                args.peak_cache = Path(cache)
                peaks.append(fresh_peak(args, args.peak_cache))
                print(f"round {round_index + 1}  GEMM peak measured now "
                      f"{peaks[-1] / 1e9:8.1f} GFLOP/s", flush=True)
            for name, measure in variants.items():
                value = measure()
                results[name].append(value)
                line = f"round {round_index + 1}  {name:34s} {value:8.3f} samples/s"
                if args.mfu:
                    mfus.setdefault(name, []).append(value * flops_per_sample / peaks[-1])
                    line += f"  MFU {mfus[name][-1]:.3f}"
                print(line, flush=True)
    median = {name: statistics.median(values) for name, values in results.items()}
    print(f"\nResNet-50 full, batch {args.batch_size}, {args.precision}, {args.threads} threads, "
          f"{args.steps} measured steps, {args.rounds} rounds (median over rounds):")
    for name, value in median.items():
        extra = (f"  MFU median {statistics.median(mfus[name]):.3f} "
                 f"(rounds {min(mfus[name]):.3f}-{max(mfus[name]):.3f})" if args.mfu else "")
        print(f"  {name:34s} {value:8.3f} samples/s{extra}")
    if args.mfu:
        print(f"GEMM peak over rounds: {min(peaks) / 1e9:.1f}-{max(peaks) / 1e9:.1f} GFLOP/s")
    print("overhead at equal allocator settings:")
    plain = median["dtbench (DTBENCH_MALLOC_TUNING=0)"] / median["bare (plain)"]
    tuned = median["dtbench (default)"] / median["bare (+allocator tuning)"]
    print(f"  dtbench/bare, plain malloc : {plain:.3f}")
    print(f"  dtbench/bare, tuned malloc : {tuned:.3f}")
    print(f"what a user sees: dtbench (default) / plain bare loop = "
          f"{median['dtbench (default)'] / median['bare (plain)']:.3f}")


if __name__ == "__main__":
    main()
