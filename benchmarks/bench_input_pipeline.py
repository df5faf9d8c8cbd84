"""resnet50 small on this machine: synthetic batches against an image folder of JPEGs read at
0, 1 and 2 loader workers, in interleaved rounds (each setting's runs sample the machine at
different times), with the data-wait share of each; then `dtbench data bench`'s curve of the
pipeline alone. Prints figures, asserts nothing.

    python benchmarks/bench_input_pipeline.py [--rounds 3] [--steps 20] [--keep DIR]
"""
from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = (("synthetic", None), ("JPEG folder, 0 workers", 0), ("JPEG folder, 1 worker", 1),
            ("JPEG folder, 2 workers", 2))


def dtbench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=ROOT, text=True,
                          capture_output=True, check=False)


def metric(record: dict, name: str) -> dict | None:
    return next((m for m in record["metrics"] if m["name"] == name), None)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--keep", help="keep the dataset and records in this folder")
    args = parser.parse_args()
    root = Path(args.keep or tempfile.mkdtemp(prefix="bench-input-"))
    root.mkdir(parents=True, exist_ok=True)
    data = root / "jpeg"
    if not data.exists():
        made = dtbench("data", "make", "-w", "resnet50", "--size", "small", "--format",
                       "imagefolder", "--samples", str(args.samples), "-o", str(data))
        print(made.stdout.strip() or made.stderr.strip())
    found: dict[str, list[tuple[float, float | None]]] = {name: [] for name, _ in SETTINGS}
    for round_ in range(args.rounds):
        for name, workers in SETTINGS:
            out = root / f"r{round_}-{workers}.json"
            extra = [] if workers is None else ["--data", str(data), "--loader-workers",
                                                str(workers)]
            run = dtbench("run", "-w", "resnet50", "--size", "small", "--steps",
                          str(args.steps), "--warmup", "3", "--peak", "cached", "-q", "--out",
                          str(root / "store"), "--json", str(out), *extra)
            if run.returncode != 0:
                print(f"{name}: failed: {run.stderr.strip()[-300:]}")
                continue
            record = json.loads(out.read_text())[0]
            share = metric(record, "data_wait_share")
            found[name].append((metric(record, "throughput")["value"],
                                share["value"] if share else None))
    print(f"\nresnet50/small, {cpu_model()}, {args.rounds} interleaved rounds of "
          f"{args.steps} steps (batch = the preset's, threads = the machine's)")
    print(f"{'setting':<26} {'samples/s (median)':>19} {'runs':>18} {'data wait share':>16}")
    for name, _ in SETTINGS:
        rows = found[name]
        if not rows:
            continue
        rates = [r for r, _ in rows]
        shares = [s for _, s in rows if s is not None]
        runs = ", ".join(f"{r:.1f}" for r in rates)
        share = f"{statistics.median(shares):.1%}" if shares else "-"
        print(f"{name:<26} {statistics.median(rates):>19.1f} {runs:>18} {share:>16}")
    bench = dtbench("data", "bench", "-w", "resnet50", "--size", "small", "--data", str(data),
                    "--workers", "0,1,2", "--batches", "40")
    print("\n" + (bench.stdout.strip() or bench.stderr.strip()))
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
