"""Time `dtbench report` and `dtbench compare` on pytest-benchmark files of many rounds.

    python benchmarks/bench_large_inputs.py [--rounds 100000]

Prints seconds per command; the goal is well under 10 s at 100,000 rounds on 2 cores.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "harness" / "compare"))

from test_large_inputs import benchmark_file  # noqa: E402

from harness.commands.cli import main  # noqa: E402


def run() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        base = benchmark_file(Path(folder) / "base.json", args.rounds)
        slow = benchmark_file(Path(folder) / "slow.json", args.rounds, scale=1.2, seed=1)
        for label, argv in (("report", ["report", str(base), "-o", f"{folder}/r.md"]),
                            ("compare", ["compare", str(base), str(slow),
                                         "--json", f"{folder}/c.json"])):
            started = time.perf_counter()
            code = main(argv)
            print(f"{label:8} {args.rounds} rounds: {time.perf_counter() - started:6.2f} s "
                  f"(exit {code})", file=sys.stderr)


if __name__ == "__main__":
    run()
