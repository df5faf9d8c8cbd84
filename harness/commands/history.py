"""`dtbench history [PATH ...]`: a metric per machine over commits, and the steps in it."""
from __future__ import annotations

import argparse
import sys
from typing import Any

from harness.commands.options import (
    add_json_option,
    add_output_file,
    add_record_paths,
    check_default_store,
    json_target,
    percentage,
    write_json,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_record_paths(parser)
    parser.add_argument("--metric", default="throughput",
                        help="the metric to follow (default throughput)")
    parser.add_argument("-w", "--workload", action="append", metavar="WORKLOAD",
                        help="only this workload (repeatable; default: every workload)")
    parser.add_argument("--min-effect", type=percentage, default=5.0, metavar="PCT",
                        help="smallest step reported, in percent (default 5)")
    add_json_option(parser, "the series and their steps")
    add_output_file(parser, "a page of trend plots with the change points marked (besides the "
                    "text)", (".html", ".htm"), metavar="FILE.html", default="none")


def check_metric(name: str, records: list[dict[str, Any]]) -> None:
    """A metric neither catalogued nor held by any record is a misspelling (exit 2, naming the
    metrics the records hold), not a history with nothing in it (exit 3)."""
    from harness.core.errors import UsageError, unknown_name
    from harness.facts.metrics import CATALOGUE, metric_info

    held = sorted({str(metric["name"]) for record in records
                   for metric in record.get("metrics") or []
                   if isinstance(metric, dict) and metric.get("name")})
    if name not in held and metric_info(name) is None:
        raise UsageError(unknown_name("metric", name, held or [m.name for m in CATALOGUE]))


def command(args: argparse.Namespace) -> int:
    from harness.compare.history import ALPHA, build_series, render
    from harness.core.errors import EXIT_NOTHING_COMPARED, EXIT_OK
    from harness.core.files import check_output_file, write_atomic
    from harness.core.outputs import clean_text, terminal_text
    from harness.core.secrets import shown_command
    from harness.records.summary import INDEXED_METRICS
    from harness.store.sources import catalog_inputs

    page = check_output_file(args.output, "-o") if getattr(args, "output", None) else None
    json_file = json_target(args)
    check_default_store(args.paths)
    catalog = catalog_inputs(args.paths)
    rows = [row for row in catalog.rows if not args.workload or row.get("workload") in
            args.workload]
    # The index holds the headline metrics: their series need no record parsed.
    records = catalog.summaries(rows) if args.metric in INDEXED_METRICS else catalog.load(rows)
    for warning in catalog.warnings:
        print(f"dtbench: warning: {clean_text(warning, 1000)}", file=sys.stderr)
    series = build_series(records, args.metric, args.min_effect / 100.0, ALPHA)
    if not series:
        check_metric(args.metric, records)
    sys.stdout.write(terminal_text(render(series), 2000))  # machine labels are records' text
    write_json(json_file, [{
        "machine": s.machine, "experiment": s.experiment, "metric": s.metric,
        "points": [{"label": p.label, "when": p.when, "values": p.values} for p in s.points],
        "steps": [step.as_dict() for step in s.steps]} for s in series])
    if page is not None:
        from harness.publish.trends import history_page, unit_of

        command = shown_command(["dtbench", "history", *args.paths, "--metric", args.metric,
                                 *(word for w in args.workload or () for word in ("-w", w)),
                                 "-o", str(page)])
        write_atomic(page, history_page(series, args.metric, command,
                                              unit_of(records, args.metric)))
    return EXIT_OK if series else EXIT_NOTHING_COMPARED
