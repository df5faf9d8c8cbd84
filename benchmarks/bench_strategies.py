"""Strategies side by side: per-rank state bytes and peak memory, bytes per step by kind, and
throughput, each as a ratio to ddp, from runs interleaved round by round in one invocation.

    python benchmarks/bench_strategies.py          # lstm, resnet50; ddp, zero1, fsdp
    python benchmarks/bench_strategies.py -w alexnet -w lstm \\
        -s ddp -s fsdp -s pipeline -s tensor -s dp-tp --rounds 3

Prints figures and asserts nothing. Runs `dtbench run --repeat R` (round by round: A B C,
A B C), so every strategy meets the machine's phases alike; medians over the rounds.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("gradient", "parameter", "activation", "control")


def metric(record: dict, name: str) -> dict | None:
    return next((m for m in record["metrics"] if m["name"] == name), None)


def value(record: dict, name: str) -> float | None:
    found = metric(record, name)
    return found["value"] if found else None


def per_rank(record: dict, name: str) -> list[float]:
    found = metric(record, name)
    return list(found.get("per_rank") or []) if found else []


def mib(x: float | None) -> str:
    return "-" if x is None else f"{x / 2**20:8.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-w", "--workload", action="append")
    parser.add_argument("-s", "--strategy", action="append")
    parser.add_argument("--size", default="small")
    parser.add_argument("-n", "--nproc", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--out", help="keep the records here (default: a temporary folder)")
    args = parser.parse_args()
    workloads = args.workload or ["lstm", "resnet50"]
    strategies = args.strategy or ["ddp", "zero1", "fsdp"]
    out = Path(args.out or tempfile.mkdtemp(prefix="bench-strategies-"))
    command = [sys.executable, "-m", "harness", "run", "--size", args.size, "-n",
               str(args.nproc), "--comm", "gloo", "--repeat", str(args.rounds), "--steps",
               str(args.steps), "--out", str(out), "-q",
               *[a for w in workloads for a in ("-w", w)],
               *[a for s in strategies for a in ("--strategy", s)]]
    print("$", " ".join(command[2:]), file=sys.stderr)
    subprocess.run(command, cwd=ROOT, check=False)
    records = [json.loads(p.read_text()) for p in sorted(out.rglob("*.json"))]
    records = [r for r in records if r.get("status") == "success"]
    print(subprocess.run(["lscpu"], capture_output=True, text=True).stdout.split("\n")[7])
    for workload in workloads:
        print(f"\n{workload} ({args.size}, {args.nproc} ranks, gloo, {args.rounds} rounds; "
              "medians over rounds; ratios to ddp)")
        print(f"{'strategy':<10} {'samples/s':>10} {'x ddp':>6} {'state/rank MiB':>15} "
              f"{'x ddp':>6} {'peak RSS/rank MiB':>18} {'x ddp':>6}  "
              + "  ".join(f"{k[:5]} KiB/step" for k in KINDS))
        rows = {}
        for strategy in strategies:
            mine = [r for r in records if r["spec"]["workload"] == workload
                    and r["spec"].get("strategy") == strategy]
            if not mine:
                continue
            rows[strategy] = {
                "throughput": statistics.median(value(r, "throughput") for r in mine),
                "state": statistics.median(max(per_rank(r, "state_bytes") or [0]) for r in mine),
                "peak": statistics.median(max(per_rank(r, "peak_memory") or [0]) for r in mine),
                **{k: statistics.median(value(r, f"comm_bytes_{k}") or 0 for r in mine)
                   for k in KINDS}}
        base = rows.get("ddp")
        for strategy, row in rows.items():
            def ratio(key: str, row: dict = row, base: dict | None = base) -> str:
                return f"{row[key] / base[key]:6.2f}" if base and base[key] else "     -"
            print(f"{strategy:<10} {row['throughput']:10.1f} {ratio('throughput')} "
                  f"{mib(row['state']):>15} {ratio('state')} {mib(row['peak']):>18} "
                  f"{ratio('peak')}  "
                  + "  ".join(f"{row[k] / 1024:14.1f}" for k in KINDS))
    print(f"\nrecords: {out}")


if __name__ == "__main__":
    main()
