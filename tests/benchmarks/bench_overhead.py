"""Harness overhead: `dtbench run` against a bare hand-written loop, side by side.

Both train ResNet-50 (full size) at the same batch, precision and threads, in fresh
processes, alternating A/B/A/B so drift on a shared machine hits both equally. Prints the
median-step throughput of each and their ratio; it asserts nothing (a benchmark, not a test).

    python tests/benchmarks/bench_overhead.py --rounds 2 --steps 20
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def bare(args: argparse.Namespace) -> float:
    out = subprocess.run(
        [sys.executable, str(ROOT / "tests/benchmarks/bare_loop.py"), "--batch-size",
         str(args.batch_size), "--steps", str(args.steps), "--warmup", str(args.warmup),
         "--threads", str(args.threads), "--precision", args.precision],
        check=True, capture_output=True, text=True).stdout
    return float(json.loads(out.strip().splitlines()[-1])["throughput"])


def harness(args: argparse.Namespace) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        records = Path(tmp) / "records.json"
        subprocess.run(
            [sys.executable, "-m", "harness.cli", "run", "-w", "resnet50", "--size", "full",
             "--batch-size", str(args.batch_size), "--precision", args.precision,
             "--steps", str(args.steps), "--warmup", str(args.warmup),
             "--threads", str(args.threads), "--out", tmp, "--json", str(records), "-q"],
            check=True, capture_output=True, text=True, cwd=ROOT)
        record = json.loads(records.read_text())[0]
        if record["status"] != "success":
            raise SystemExit(f"harness run {record['status']}: {record['error']}")
        return next(m["value"] for m in record["metrics"] if m["name"] == "throughput")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    args = parser.parse_args()
    results: dict[str, list[float]] = {"bare": [], "dtbench": []}
    for round_index in range(args.rounds):
        for name, fn in (("bare", bare), ("dtbench", harness)):
            value = fn(args)
            results[name].append(value)
            print(f"round {round_index + 1} {name:8s} {value:8.3f} samples/s", flush=True)
    bare_median = statistics.median(results["bare"])
    harness_median = statistics.median(results["dtbench"])
    print(f"bare loop  median {bare_median:.3f} samples/s  {results['bare']}")
    print(f"dtbench    median {harness_median:.3f} samples/s  {results['dtbench']}")
    print(f"ratio dtbench/bare = {harness_median / bare_median:.3f} "
          f"(ResNet-50 full, batch {args.batch_size}, {args.precision}, "
          f"{args.threads} threads, {args.steps} steps x {args.rounds} rounds)")


if __name__ == "__main__":
    main()
