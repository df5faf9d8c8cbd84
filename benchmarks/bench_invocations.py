"""How far apart fresh invocations of one run fall, beside the interval each one states.

    python benchmarks/bench_invocations.py                  # quick's workloads, 10 each
    python benchmarks/bench_invocations.py --runs 10 --variant OMP_PROC_BIND=close

Each round runs every workload once, `dtbench run -w W --size small`, each in a fresh process
(and, with --variant, once more under that environment), so that the variants and workloads
interleave and a slow period of the host falls on all of them. Prints per workload and
variant: the throughput's median, its range over the invocations (max/min), and the 95%
intervals the invocations stated; an interval that does not cover the median of all the
invocations claimed more than the next invocation delivers. Prints figures, asserts nothing;
run it alone on the machine (it is a benchmark). --json FILE keeps every invocation.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = ("alexnet", "resnet50", "hep_cnn", "lstm")


def invoke(workload: str, env: dict[str, str], folder: Path) -> dict[str, Any]:
    out = folder / f"{workload}-{len(list(folder.glob('*.json')))}.json"
    done = subprocess.run([sys.executable, "-m", "harness", "run", "-w", workload, "--size",
                           "small", "-q", "--out", str(folder / "store"), "--json", str(out)],
                          cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True)
    if done.returncode != 0 or not out.exists():
        return {"error": (done.stderr.strip().splitlines() or ["?"])[-1]}
    record = json.loads(out.read_text())[0]
    metric = next(m for m in record["metrics"] if m["name"] == "throughput")
    low, high = metric["stats"]["ci95"]
    value = metric["value"]
    return {"throughput": value, "ci_pct": (high - low) / 2 / value * 100 if value else None,
            "busy": record.get("load", {}).get("busy")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="invocations per workload")
    parser.add_argument("-w", "--workload", action="append", help="repeatable (default: quick's)")
    parser.add_argument("--variant", action="append", default=[], metavar="VAR=VALUE",
                        help="also run each invocation under this environment (repeatable)")
    parser.add_argument("--json", help="write every invocation here")
    args = parser.parse_args()
    workloads = args.workload or list(WORKLOADS)
    variants = {"as shipped": {}}
    for text in args.variant:
        name, _, value = text.partition("=")
        variants[text] = {name: value}
    found: dict[str, dict[str, list[dict[str, Any]]]] = {}
    with tempfile.TemporaryDirectory(prefix="dtbench-invocations-") as tmp:
        for round_ in range(args.runs):
            for workload in workloads:
                for label, env in variants.items():
                    result = invoke(workload, env, Path(tmp))
                    found.setdefault(workload, {}).setdefault(label, []).append(result)
                    print(f"round {round_ + 1} {workload} [{label}]: {result}", flush=True)
    print(f"\n{platform.node()}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs")
    print(f"{'workload':10} {'variant':24} {'median/s':>10} {'max/min':>8} "
          f"{'stated 95% (med, max)':>22} {'intervals missing the median':>30}")
    for workload, by_variant in found.items():
        for label, results in by_variant.items():
            good = [r for r in results if "throughput" in r]
            if not good:
                print(f"{workload:10} {label:24} all failed: {results[0].get('error')}")
                continue
            values = [r["throughput"] for r in good]
            middle = statistics.median(values)
            stated = [r["ci_pct"] for r in good if r["ci_pct"] is not None]
            missing = sum(1 for r in good if r["ci_pct"] is not None
                          and abs(r["throughput"] - middle) / r["throughput"] * 100
                          > r["ci_pct"])
            intervals = f"±{statistics.median(stated):.1f}%, ±{max(stated):.1f}%"
            print(f"{workload:10} {label:24} {middle:10.1f} {max(values) / min(values):8.3f} "
                  f"{intervals:>22} {missing:>4} of {len(good)}")
    if args.json:
        Path(args.json).write_text(json.dumps(found, indent=1))


if __name__ == "__main__":
    main()
