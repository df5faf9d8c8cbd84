"""The validation table of `dtbench predict`: every measured multi-rank run in a store beside
its prediction from the store's own calibration records, with the error and what made it.

    python tests/benchmarks/bench_predict.py /tmp/pred-store
    python tests/benchmarks/bench_predict.py /tmp/pred-store --make   # measure first (~5 min)

--make runs, one after another, what the table needs on one machine: hep_cnn and lstm (small)
on 1 and 2 ranks over gloo and MPI, the single-rank runs at one thread per rank that the
2-rank runs are calibrated against, 4 ranks over gloo, and `dtbench comm` sweeps of the
same backends and world sizes. Prints figures; asserts nothing (a benchmark).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

OPS = "allreduce,allgather,reducescatter,broadcast"


def measurements(store: str) -> list[list[str]]:
    """The dtbench commands whose records the validation table uses."""
    run = ["run", "-w", "hep_cnn", "-w", "lstm", "--size", "small", "--out", store, "-q"]
    comm = ["comm", "--sizes", "1K:32M", "--out", store, "-q"]
    return [
        [*run, "-n", "1,2", "--comm", "gloo"],
        [*run, "-n", "1", "--threads", "1"],
        [*run, "-n", "2", "--comm", "mpi", "--launcher", "mpirun"],
        [*run, "-n", "4", "--threads", "1", "--comm", "gloo"],
        [*comm, "--comm", "gloo", "-n", "2", "--op", OPS],
        [*comm, "--comm", "mpi", "--launcher", "mpirun", "-n", "2", "--op", OPS],
        [*comm, "--comm", "gloo", "-n", "4", "--op", "allreduce,broadcast"],
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", help="records or store with measured and calibration runs")
    parser.add_argument("--calibrate-from", action="append",
                        help="calibrate from here instead of the store itself")
    parser.add_argument("--algorithm", default="ring",
                        choices=("ring", "tree", "halving-doubling"))
    parser.add_argument("--make", action="store_true", help="run the measurements first")
    args = parser.parse_args()
    if args.make:
        for words in measurements(args.store):
            print("$ dtbench " + " ".join(words), flush=True)
            subprocess.run([sys.executable, "-m", "harness", *words], cwd=ROOT, check=False)

    from harness.core.text import render_table
    from harness.predict.inputs import load_calibration
    from harness.predict.validate import HEADER, summary, table_rows, validate

    warnings: list[str] = []
    measured = load_calibration((args.store,), warnings)
    calibration = load_calibration(tuple(args.calibrate_from or [args.store]), warnings)
    rows = validate(measured, calibration, args.algorithm)
    print(render_table(HEADER, table_rows(rows)))
    print(summary(rows))
    print("\nwhere the predicted time goes (ms per step):")
    parts = []
    for row in rows:
        estimate = row.point.estimate if row.point else None
        if estimate is None:
            continue
        comm = ", ".join(f"{label} {seconds * 1e3:.2f}" for label, seconds in
                         estimate.comm.items())
        parts.append([row.record["run_id"], f"{estimate.compute_time * 1e3:.1f}",
                      comm or "-", f"{estimate.step_time * 1e3:.1f}",
                      f"{(row.measured or 0) * 1e3:.1f}"])
    print(render_table(("run", "compute", "communication", "predicted", "measured"), parts))
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
