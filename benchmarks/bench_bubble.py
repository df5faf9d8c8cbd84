"""The pipeline's bubble: measured idle share per stage against GPipe's (p-1)/(m+p-1), for
2 stages and M = 1, 2, 4, 8 microbatches.

    python benchmarks/bench_bubble.py                 # hep_cnn tiny, batch 16
    python benchmarks/bench_bubble.py -w alexnet --size small --batch 32

Prints figures and asserts nothing. The measured bubble is 1 - (stage forward + backward
time) / schedule time, the mean over the two stages of each rank's mean over steps; on an
oversubscribed or busy machine it is above the theory (waiting includes transfers and the
other rank's lost cycles).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-w", "--workload", default="hep_cnn")
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--schedule", default="gpipe")
    args = parser.parse_args()
    print(f"{args.workload} {args.size}, batch {args.batch}, {args.schedule}, 2 stages on "
          "2 ranks (gloo)")
    print(f"{'M':>3}  {'theory':>7}  {'measured':>8}  {'stage0':>7}  {'stage1':>7}  "
          f"{'samples/s':>9}  {'activation B/step':>17}")
    for micro in (1, 2, 4, 8):
        with tempfile.TemporaryDirectory() as out:
            done = subprocess.run(
                [sys.executable, "-m", "harness", "run", "-w", args.workload, "--size",
                 args.size, "-n", "2", "--comm", "gloo", "--strategy", "pipeline",
                 "--strategy-opt", f"schedule={args.schedule}", "--strategy-opt",
                 f"microbatches={micro}", "--batch-size", str(args.batch), "--threads", "1",
                 "--steps", str(args.steps), "--warmup", "2", "-q", "--out", out],
                cwd=ROOT, capture_output=True, text=True)
            files = list(Path(out).rglob("*.json"))
            if done.returncode or not files:
                print(f"{micro:>3}  failed: {(done.stderr or done.stdout).strip()[-300:]}")
                continue
            record = json.loads(files[0].read_text())
        metrics = {m["name"]: m for m in record["metrics"]}
        bubble = metrics.get("bubble_fraction", {})
        ranks = bubble.get("per_rank") or [None, None]
        activation = metrics.get("comm_bytes_activation", {}).get("value")
        throughput = metrics.get("throughput", {}).get("value")
        print(f"{micro:>3}  {bubble.get('theory', float('nan')):7.3f}  "
              f"{bubble.get('value', float('nan')):8.3f}  {ranks[0]:7.3f}  {ranks[1]:7.3f}  "
              f"{throughput:9.1f}  {activation:17.0f}")


if __name__ == "__main__":
    main()
