"""Large-batch training, counted not timed: epochs and samples to the quality target at the
workload's default global batch (1x) and at 8x it, with plain SGD at the small batch's rate
and with the large-batch options (--lr-scaling, --warmup-epochs, --optimizer lars).

    python benchmarks/bench_large_batch.py                 # hep_cnn tiny, seeds 0 1 2
    python benchmarks/bench_large_batch.py -w lstm --seeds 0 1

One rank; 8x is one rank's batch 8x larger, the same arithmetic as 8 data-parallel ranks at
the default batch (no batch normalisation in these models). Prints the table of
docs/measurements/large-batch.md; asserts nothing. Wall-clock time is not the figure: the
epochs and samples are, so a busy machine changes nothing.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# (label, batch multiple, extra run options); WARM is --warmup-epochs, ETA --lars-eta
VARIANTS = [
    ("SGD", 1, ()),
    ("SGD, same rate", 8, ()),
    ("SGD, sqrt", 8, ("--lr-scaling", "sqrt")),
    ("SGD, linear", 8, ("--lr-scaling", "linear")),
    ("SGD, linear + warm-up", 8, ("--lr-scaling", "linear", "--warmup-epochs", "WARM")),
    ("LARS (default eta), linear + warm-up", 8, ("--optimizer", "lars", "--lr-scaling",
                                                 "linear", "--warmup-epochs", "WARM")),
    ("LARS, linear", 8, ("--optimizer", "lars", "--lr-scaling", "linear", "--lars-eta",
                         "ETA")),
    ("LARS, linear + warm-up", 8, ("--optimizer", "lars", "--lr-scaling", "linear",
                                   "--warmup-epochs", "WARM", "--lars-eta", "ETA")),
]


def outcome(out: Path) -> tuple[bool, int, int | None, int]:
    """(reached, epochs run, samples to target or None, global batch) of the run's record."""
    (path,) = list(out.rglob("*.json"))
    record = json.loads(path.read_text())
    # a run that misses its target is a failed record, and an outcome of this table
    if record["status"] != "success" and "not reached" not in str(record.get("error")):
        raise SystemExit(f"{out.name}: {record['status']}: {record.get('error')}")
    metrics = {m["name"]: m for m in record["metrics"]}
    quality = metrics["quality"]
    samples = metrics.get("samples_to_target", {}).get("value")
    return (bool(quality["reached"]), len(quality["history"]),
            int(samples) if quality["reached"] and samples else None,
            int(record["spec"]["global_batch"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-w", "--workload", default="hep_cnn")
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--warmup-epochs", default="1")
    parser.add_argument("--lars-eta", default="0.1",
                        help="the trust coefficient of the LARS rows that name one")
    parser.add_argument("--only", nargs="+", type=int, default=None,
                        help="run only these rows of the table (0-based)")
    args = parser.parse_args()
    from workloads import get_workload

    preset = get_workload(args.workload).preset(args.size)
    base = preset.default_batch("cpu")
    root = Path(tempfile.mkdtemp(prefix="bench-large-batch-"))
    rows = []
    for index, (label, multiple, options) in enumerate(VARIANTS):
        if args.only is not None and index not in args.only:
            continue
        options = tuple(args.warmup_epochs if o == "WARM" else args.lars_eta if o == "ETA"
                        else o for o in options)
        found = []
        for seed in args.seeds:
            out = root / f"{label.replace(' ', '_').replace(',', '')}-{multiple}-{seed}"
            command = [sys.executable, "-m", "harness", "run", "-w", args.workload, "--size",
                       args.size, "--mode", "ttt", "--threads", "1", "--batch-size",
                       str(base * multiple), "--seed", str(seed), "--out", str(out), "-q",
                       *options]
            subprocess.run(command, cwd=ROOT, check=False, capture_output=True)
            found.append(outcome(out))
            reached, epochs, samples, batch = found[-1]
            print(f"  {label:24s} {multiple}x seed {seed}: reached={reached} epochs={epochs} "
                  f"samples={samples}", flush=True)
        rows.append((label, multiple, found, " ".join(options)))
    print(f"\n{args.workload} {args.size}: target {preset.target.metric} "
          f"{preset.target.value:g} within {preset.target.max_epochs} epochs; default batch "
          f"{base}, seeds {' '.join(map(str, args.seeds))}")
    print("| batch | optimizer and rate | options | reached | epochs to target (each seed) "
          "| samples to target (each seed) |")
    print("|---|---|---|---:|---|---|")
    for label, multiple, found, options in rows:
        reached = sum(r for r, _, _, _ in found)
        epochs = ", ".join(str(e) if r else f">{e}" for r, e, _, _ in found)
        samples = ", ".join(f"{s:,}" if s else "-" for _, _, s, _ in found)
        print(f"| {multiple}x ({found[0][3]}) | {label} | {options or '-'} | "
              f"{reached}/{len(found)} | {epochs} | {samples} |")


if __name__ == "__main__":
    main()
