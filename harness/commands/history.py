"""`dtbench history PATH ...`: a metric per machine over commits, and the steps in it."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from harness.commands.arguments import percentage


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="*", default=["results"], metavar="PATH",
                        help="record files, --json lists or stores (default: ./results)")
    parser.add_argument("--metric", default="throughput",
                        help="the metric to follow (default throughput)")
    parser.add_argument("-w", "--workload", action="append",
                        help="only this workload (repeatable)")
    parser.add_argument("--min-effect", type=percentage, default=5.0,
                        help="smallest step reported, in percent (default 5)")
    parser.add_argument("--json", dest="json_file", help="also write the series and steps here")
    parser.add_argument("-o", "--output", metavar="FILE.html",
                        help="also write a page of trend plots with the change points marked")


def command(args: argparse.Namespace) -> int:
    from harness.compare.history import ALPHA, build_series, render
    from harness.core.errors import EXIT_NOTHING_COMPARED, EXIT_OK
    from harness.core.files import check_output_file, write_atomic
    from harness.core.outputs import clean_text, terminal_text
    from harness.core.secrets import shown_command
    from harness.records.summary import INDEXED_METRICS
    from harness.store.sources import catalog_inputs

    page = check_output_file(args.output, "-o") if getattr(args, "output", None) else None
    catalog = catalog_inputs(args.paths)
    rows = [row for row in catalog.rows if not args.workload or row.get("workload") in
            args.workload]
    # The index holds the headline metrics: their series need no record parsed.
    records = catalog.summaries(rows) if args.metric in INDEXED_METRICS else catalog.load(rows)
    for warning in catalog.warnings:
        print(f"dtbench: warning: {clean_text(warning, 1000)}", file=sys.stderr)
    series = build_series(records, args.metric, args.min_effect / 100.0, ALPHA)
    sys.stdout.write(terminal_text(render(series), 2000))  # machine labels are records' text
    if args.json_file:
        write_atomic(Path(args.json_file), json.dumps([{
            "machine": s.machine, "experiment": s.experiment, "metric": s.metric,
            "points": [{"label": p.label, "when": p.when, "values": p.values}
                       for p in s.points],
            "steps": [step.as_dict() for step in s.steps]} for s in series], indent=1) + "\n")
    if page is not None:
        from harness.publish.trends import history_page, unit_of

        command = shown_command(["dtbench", "history", *args.paths, "--metric", args.metric,
                                 *(word for w in args.workload or () for word in ("-w", w)),
                                 "-o", str(page)])
        write_atomic(page, history_page(series, args.metric, command,
                                              unit_of(records, args.metric)))
    return EXIT_OK if series else EXIT_NOTHING_COMPARED
