"""`dtbench doctor`: is this node as it should be? Its options and glue; the checks, the record
and the fleet comparison are harness/doctor/. `--fleet` puts many nodes' doctor records side by
side and names the ones that stand out."""
from __future__ import annotations

import argparse
import sys
import time

from harness.commands.options import add_backend_option, add_output_options
from harness.core.errors import EXIT_FAILED, EXIT_OK, UsageError
from harness.core.text import render_table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_backend_option(parser)
    parser.add_argument("--fleet", nargs="+", metavar="PATH",
                        help="compare the doctor records in these stores, machine folders, "
                        "record files or PostgreSQL URLs, each node against the fleet median; "
                        "exit 1 when a node stands out (default: none, check this node)")
    parser.add_argument("--no-collectives", action="store_true",
                        help="leave out the collective checks between the node's ranks")
    add_output_options(parser, "the doctor record")


def fleet_command(args: argparse.Namespace) -> int:
    from harness.doctor.fleet import fleet, fleet_rows, outlier_lines
    from harness.store.sources import load_inputs

    loaded = load_inputs(args.fleet)
    for warning in loaded.warnings:
        print(f"dtbench: warning: {warning}", file=sys.stderr)
    nodes, figures = fleet(loaded.records)
    if not nodes:
        raise UsageError(f"no successful doctor records in {', '.join(args.fleet)}")
    print(f"{len(nodes)} node(s): {', '.join(nodes)}")
    print(render_table(("figure", "unit", "nodes", "median", "lowest", "highest",
                        "stands out"), fleet_rows(figures)))
    lines = outlier_lines(figures)
    for line in lines:
        print(f"  ! {line}")
    if not lines:
        print("no node stands out (median absolute deviation rule, docs/guide/doctor.md)")
    return EXIT_FAILED if lines else EXIT_OK


def command(args: argparse.Namespace) -> int:
    if args.fleet:
        return fleet_command(args)
    from harness.commands.options import json_target, write_json
    from harness.doctor.checks import verdict_of
    from harness.doctor.node import checks_table, doctor_record, node_checks
    from harness.records.record import new_run_id, utc_now
    from harness.run.plan import best_backend
    from harness.store.targets import destination, open_writer

    backend = best_backend() if args.backend == "auto" else args.backend
    if backend not in ("cpu", "cuda"):
        raise UsageError(f"--backend {backend}: choose cpu, cuda or auto")
    store = open_writer(args.out)
    json_file = json_target(args, store.root)
    store.ensure_writable()
    created = utc_now()
    run_id = new_run_id("doctor", created)
    started = time.perf_counter()

    def say(text: str) -> None:
        if not args.quiet:
            print(f"doctor: {text}", file=sys.stderr, flush=True)

    checks = node_checks(backend, run_id, not args.no_collectives, say)
    record = doctor_record(checks, backend, run_id, created)
    store.add(record)
    print(checks_table(checks))
    verdict = verdict_of(checks)
    counts = {v: sum(c.verdict == v for c in checks) for v in ("pass", "warn", "fail")}
    print(f"\n{verdict.upper()}: {counts['pass']} pass, {counts['warn']} warn, "
          f"{counts['fail']} fail ({time.perf_counter() - started:.0f} s); record in "
          f"{destination(store)}")
    write_json(json_file, [record])
    return EXIT_FAILED if verdict == "fail" else EXIT_OK
