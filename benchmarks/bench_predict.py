"""The validation table of `dtbench predict`: every measured multi-rank run in a store beside
its prediction from the store's own calibration records, with the error and what made it.

    python benchmarks/bench_predict.py results/predict            # predict only
    python benchmarks/bench_predict.py STORE --make               # measure first (~25 min)
    python benchmarks/bench_predict.py STORE --write STORE/validation.md

--make runs, one after another, what the table needs on one machine:
- one node: hep_cnn and lstm (small) on 1 and 2 ranks over gloo and MPI, the single-rank runs
  at one thread per rank that multi-rank runs are calibrated against, 4 ranks over gloo and
  MPI (oversubscribed on 2 cores: labelled by the table's note), the strategies fsdp and
  pipeline at 2 ranks and ps-sync at 3 (one server, two workers), fsdp at 1 rank over gloo
  at one thread (its own per-step work, harness/predict/overhead.py: calibration, not a row
  of the table), and `dtbench comm` sweeps of the same backends and world sizes;
- two hosts (needs root: two network namespaces joined by a veth, see
  tests/distributed/netns.py): hep_cnn small over torchrun+gloo, one rank per host, with the
  link uncapped and capped by `tc tbf` at 1 Gbit/s, 200 Mbit/s and 50 Mbit/s, each beside an
  allreduce/broadcast sweep over the same link. The records name the cap
  (machine.interconnect.tbf_mbps), so each run is predicted from its own link's fit.
--write FILE writes the table as Markdown (results/predict/validation.md is this output for
the published store; a test regenerates it byte for byte). Prints figures; asserts nothing.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

OPS = "allreduce,allgather,reducescatter,broadcast"
DTBENCH = [sys.executable, "-m", "harness"]
RATES = (None, "1gbit", "200mbit", "50mbit")
PUBLISHED = "python benchmarks/bench_predict.py results/predict --write " \
            "results/predict/validation.md"


def measurements(store: str) -> list[list[str]]:
    """The one-node dtbench commands whose records the validation table uses."""
    run = ["run", "-w", "hep_cnn", "-w", "lstm", "--size", "small", "--out", store, "-q"]
    comm = ["comm", "--sizes", "1K:32M", "--out", store, "-q"]
    return [
        [*run, "-n", "1,2", "--comm", "gloo"],
        [*run, "-n", "1", "--threads", "1"],
        [*run, "-n", "2", "--comm", "mpi", "--launcher", "mpirun"],
        [*run, "-n", "4", "--threads", "1", "--comm", "gloo"],
        [*run, "-n", "4", "--threads", "1", "--comm", "mpi", "--launcher", "mpirun"],
        [*run, "-n", "2", "--comm", "gloo", "--strategy", "fsdp", "--strategy", "pipeline"],
        # fsdp's own per-step work, measured at one rank (calibration, not predicted): the
        # process group makes FSDP2 shard (without --comm the strategy leaves the model alone)
        [*run, "-n", "1", "--threads", "1", "--comm", "gloo", "--strategy", "fsdp"],
        [*run, "-n", "3", "--threads", "1", "--comm", "gloo", "--strategy", "ps-sync"],
        [*comm, "--comm", "gloo", "-n", "2", "--op", OPS],
        [*comm, "--comm", "mpi", "--launcher", "mpirun", "-n", "2", "--op", OPS],
        [*comm, "--comm", "gloo", "-n", "4", "--op", "allreduce,broadcast"],
        [*comm, "--comm", "mpi", "--launcher", "mpirun", "-n", "4", "--op", "allreduce,broadcast"],
    ]


def two_host_runs(store: str) -> None:
    """hep_cnn small across two network namespaces at each link rate, with a comm sweep."""
    common = ["--launcher", "torchrun", "--comm", "gloo", "--nnodes", "2", "-n", "1",
              "--threads", "1", "--rank-timeout", "120", "-q"]
    jobs = [["run", "-w", "hep_cnn", "--size", "small", *common],
            ["comm", "--op", "allreduce,broadcast", "--sizes", "1K:4M", "--iters", "10",
             *common]]
    over_two_hosts(store, [(rate, words) for rate in RATES for words in jobs], 29612)


def over_two_hosts(store: str, schedule: list[tuple[str | None, list[str]]],
                   first_port: int) -> None:
    """Each (tc tbf rate or None, dtbench words) in turn across two network namespaces
    joined by a veth capped at that rate (tests/distributed/netns.py), node 0's records in
    `store`; skipped, saying why, where namespaces or tc are not available."""
    sys.path.insert(0, str(ROOT / "tests" / "distributed"))
    from netns import netns_pair, netns_unavailable_reason, tc_unavailable_reason

    reason = netns_unavailable_reason() or tc_unavailable_reason()
    if reason is not None:
        print(f"two-host runs skipped: {reason}", flush=True)
        return
    store_path = Path(store).resolve()
    with netns_pair() as pair, tempfile.TemporaryDirectory(prefix="dtb-node1-") as scratch:
        env = {k: v for k, v in os.environ.items()
               if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
        env.update(GLOO_SOCKET_IFNAME=pair.ifname,
                   PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])))
        for port, (rate, words) in enumerate(schedule, start=first_port):
            pair.set_rate(rate)
            run_two_hosts(pair, [*words, "--master-addr", pair.addr_a, "--master-port",
                                 str(port)], env, store_path, Path(scratch),
                          f"link {rate or 'uncapped'}")
        pair.set_rate(None)


def run_two_hosts(pair: Any, args: list[str], env: dict[str, str], store: Path,
                  scratch: Path, label: str) -> None:
    """One dtbench command across the two namespaces (node 0's record into `store`, node
    1's left in `scratch`), timed, its failure printed."""
    from netns import two_nodes

    print(f"$ [2 hosts, {label}] dtbench {' '.join(args)}", flush=True)
    started = time.monotonic()
    try:
        node0, node1 = two_nodes(pair, [*DTBENCH, *args], env, store, scratch, scratch, 900)
    except subprocess.TimeoutExpired:
        print("  timed out", flush=True)
        return
    print(f"  node 0 exit {node0.returncode}, node 1 exit {node1.returncode}, "
          f"{time.monotonic() - started:.0f} s", flush=True)
    if node0.returncode != 0:
        print(node0.stderr[-2000:], flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", help="records or store with measured and calibration runs")
    parser.add_argument("--calibrate-from", action="append",
                        help="calibrate from here instead of the store itself")
    parser.add_argument("--algorithm", default="ring",
                        choices=("ring", "tree", "halving-doubling"))
    parser.add_argument("--make", action="store_true", help="run the measurements first")
    parser.add_argument("--no-two-hosts", action="store_true",
                        help="with --make: leave out the network-namespace runs")
    parser.add_argument("--write", metavar="FILE", help="also write the table as Markdown")
    args = parser.parse_args()
    if args.make:
        for words in measurements(args.store):
            print("$ dtbench " + " ".join(words), flush=True)
            subprocess.run([*DTBENCH, *words], cwd=ROOT, check=False)
        if not args.no_two_hosts:
            two_host_runs(args.store)

    from harness.core.text import render_table
    from harness.predict.inputs import load_calibration
    from harness.predict.validate import (
        HEADER,
        summary,
        table_rows,
        validate,
        validation_markdown,
    )

    warnings: list[str] = []
    measured = load_calibration((args.store,), warnings)
    calibration = load_calibration(tuple(args.calibrate_from or [args.store]), warnings)
    rows = validate(measured, calibration, args.algorithm)
    print(render_table(HEADER, table_rows(rows)))
    print(summary(rows))
    if args.write:
        Path(args.write).write_text(validation_markdown(rows, PUBLISHED))
        print(f"wrote {args.write}")
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
