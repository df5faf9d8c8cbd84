"""One slow worker, side by side: throughput of ddp, ps-sync, ps-async, downpour and hybrid
with and without a 3x straggler, interleaved in one invocation, and the ratios.

    python benchmarks/bench_stragglers.py                  # hep_cnn small, 2 workers
    python benchmarks/bench_stragglers.py -w lstm --factor 3 --rounds 2

Expectation (the issue's): ddp and ps-sync fall toward the straggler's pace (ratio toward
1/FACTOR), ps-async, downpour and hybrid (here: two groups of one worker) lose about the
straggler's share only (ratio toward (W - 1 + 1/FACTOR) / W). Prints figures, asserts nothing.
Every strategy has W = 2 workers; those with a server run one more rank.
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
CASES = [("ddp", 2, ()), ("ps-sync", 3, ()), ("ps-async", 3, ()), ("downpour", 3, ()),
         ("hybrid", 3, ("groups=2",))]


def throughput(out: Path) -> float:
    (path,) = list(out.rglob("*.json"))
    record = json.loads(path.read_text())
    if record["status"] != "success":
        raise SystemExit(f"{record['spec']['strategy']}: {record['status']}: {record['error']}")
    found = next(m for m in record["metrics"] if m["name"] == "throughput")
    return float(found["value"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-w", "--workload", default="hep_cnn")
    parser.add_argument("--size", default="small")
    parser.add_argument("--factor", type=float, default=3.0)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-stragglers-"))
    found: dict[tuple[str, bool], list[float]] = {}
    for round_ in range(args.rounds):
        for strategy, ranks, options in CASES:
            for slow in (False, True):
                out = root / f"{round_}-{strategy}-{slow}"
                command = [sys.executable, "-m", "harness", "run", "-w", args.workload,
                           "--size", args.size, "-n", str(ranks), "--threads", "1",
                           "--steps", str(args.steps), "--warmup", "1", "--strategy",
                           strategy, "--out", str(out), "-q",
                           *[a for o in options for a in ("--strategy-opt", o)],
                           *(["--straggler", f"1:{args.factor:g}"] if slow else [])]
                subprocess.run(command, cwd=ROOT, check=True, capture_output=True)
                found.setdefault((strategy, slow), []).append(throughput(out))
                print(f"  round {round_ + 1} {strategy:9s} straggler={slow!s:5s} "
                      f"{found[(strategy, slow)][-1]:9.1f} samples/s", flush=True)
    workers = 2
    print(f"\n{args.workload} {args.size}, {workers} workers, rank 1 a {args.factor:g}x "
          f"straggler; medians over {args.rounds} round(s)")
    print(f"{'strategy':10s} {'even':>10s} {'straggler':>10s} {'ratio':>7s}  expected toward")
    for strategy, _, _ in CASES:
        even = statistics.median(found[(strategy, False)])
        slow = statistics.median(found[(strategy, True)])
        sync = strategy in ("ddp", "ps-sync")
        toward = 1 / args.factor if sync else (workers - 1 + 1 / args.factor) / workers
        print(f"{strategy:10s} {even:10.1f} {slow:10.1f} {slow / even:7.2f}  {toward:.2f} "
              f"({'the straggler paces all' if sync else 'loses its share'})")


if __name__ == "__main__":
    main()
