"""Harness overhead: `dtbench run` against a bare hand-written loop, side by side.

Both train ResNet-50 (full size) at the same batch, precision and threads, in fresh
processes, interleaved round by round so drift on a shared machine hits all equally. The
cpu backend tunes glibc's allocator, so each side runs with and without that tuning:
dtbench/bare at equal settings is the harness's own overhead, and dtbench (default) over
the plain bare loop is what a user sees. Prints figures; asserts nothing (a benchmark).

    python tests/benchmarks/bench_overhead.py --rounds 2 --steps 20
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

ROOT = Path(__file__).resolve().parents[2]


def bare(args: argparse.Namespace, tuned: bool) -> float:
    out = subprocess.run(
        [sys.executable, str(ROOT / "tests/benchmarks/bare_loop.py"), "--batch-size",
         str(args.batch_size), "--steps", str(args.steps), "--warmup", str(args.warmup),
         "--threads", str(args.threads), "--precision", args.precision,
         *(["--malloc-tuning"] if tuned else [])],
        check=True, capture_output=True, text=True).stdout
    return float(json.loads(out.strip().splitlines()[-1])["throughput"])


def harness(args: argparse.Namespace, tuned: bool) -> float:
    env = {**os.environ, "DTBENCH_MALLOC_TUNING": "1" if tuned else "0"}
    with tempfile.TemporaryDirectory() as tmp:
        records = Path(tmp) / "records.json"
        subprocess.run(
            [sys.executable, "-m", "harness.cli", "run", "-w", "resnet50", "--size", "full",
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
    args = parser.parse_args()
    variants = {
        "bare (plain)": lambda: bare(args, tuned=False),
        "dtbench (DTBENCH_MALLOC_TUNING=0)": lambda: harness(args, tuned=False),
        "bare (+allocator tuning)": lambda: bare(args, tuned=True),
        "dtbench (default)": lambda: harness(args, tuned=True),
    }
    results: dict[str, list[float]] = {name: [] for name in variants}
    for round_index in range(args.rounds):
        for name, measure in variants.items():
            value = measure()
            results[name].append(value)
            print(f"round {round_index + 1}  {name:34s} {value:8.3f} samples/s", flush=True)
    median = {name: statistics.median(values) for name, values in results.items()}
    print(f"\nResNet-50 full, batch {args.batch_size}, {args.precision}, {args.threads} threads, "
          f"{args.steps} measured steps, {args.rounds} rounds (median over rounds):")
    for name, value in median.items():
        print(f"  {name:34s} {value:8.3f} samples/s")
    print("overhead at equal allocator settings:")
    plain = median["dtbench (DTBENCH_MALLOC_TUNING=0)"] / median["bare (plain)"]
    tuned = median["dtbench (default)"] / median["bare (+allocator tuning)"]
    print(f"  dtbench/bare, plain malloc : {plain:.3f}")
    print(f"  dtbench/bare, tuned malloc : {tuned:.3f}")
    print(f"what a user sees: dtbench (default) / plain bare loop = "
          f"{median['dtbench (default)'] / median['bare (plain)']:.3f}")


if __name__ == "__main__":
    main()
