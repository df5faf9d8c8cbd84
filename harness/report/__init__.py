"""`dtbench report`: tables (Markdown, HTML with plots, CSV) from records and stores.

The output depends only on the records and the command line, never on the time, the input
order or the working directory, so `dtbench report results -o results/report.md` rewrites
the same bytes until a record changes.
"""
from __future__ import annotations

import argparse
import csv
import io
import sys
from pathlib import Path

from harness.core.errors import UsageError
from harness.core.files import check_output_file, write_atomic
from harness.core.outputs import csv_text
from harness.records.summary import latest_rows
from harness.report import csv_format, html, markdown
from harness.report.columns import heading as column_heading
from harness.report.compose import build_report, regenerate_command
from harness.report.view import RecordView, clean_text, views_of
from harness.store.sources import Loaded, catalog_inputs
from harness.store.url import is_store_url, redact

FORMATS = ("md", "html", "csv")
SUFFIXES = {".md": "md", ".markdown": "md", ".html": "html", ".htm": "html", ".csv": "csv"}


def choose_format(fmt: str | None, output: str | None) -> str:
    """The explicit --format, else the one the -o suffix names, else Markdown."""
    if fmt is not None:
        if fmt not in FORMATS:
            raise UsageError(f"--format {fmt}: choose one of {', '.join(FORMATS)}")
        return fmt
    if output:
        return SUFFIXES.get(Path(output).suffix.lower(), "md")
    return "md"


def check_output(output: str | None) -> Path | None:
    """The -o path, after proving its directory exists and takes files (before any work)."""
    return None if output is None else check_output_file(output, "-o")


def render(loaded: Loaded, fmt: str, *, paths: list[str], regenerate: str,
           by: str | None = None, reference: str | None = None, older: int = 0,
           runs: bool = False) -> str:
    """The report of the loaded records in one format (`older`: how many records were left
    out as older than their experiment's latest; `by`: machine or record, by default machine
    where two machines or more trained; `runs`: the appendix of run ids in Markdown too)."""
    views: list[RecordView] = views_of(loaded.records)
    if fmt == "csv":
        return _machine_csv(views) if by == "machine" else csv_format.render(views)
    report = build_report(views, paths=paths, files=loaded.sources, skipped=loaded.warnings,
                          regenerate=regenerate, older=older, by=by, reference=reference,
                          runs=runs)
    if fmt == "html":
        return html.render(report, views)
    return markdown.render(report)


def _machine_csv(views: list[RecordView]) -> str:
    from harness.report import machines

    stream = io.StringIO()
    writer = csv.writer(stream, lineterminator="\n")
    writer.writerow(["machine", "commit", *map(column_heading, machines.SHOWN), "experiment",
                     "metric", "value"])
    writer.writerows([csv_text(cell) for cell in row] for row in machines.csv_rows(views))
    return stream.getvalue()


def _write_stdout(text: str) -> None:
    sys.stdout.flush()
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:
        sys.stdout.write(text)
    else:
        buffer.write(text.encode("utf-8"))
        buffer.flush()


def command(args: argparse.Namespace) -> int:
    """Load the inputs, warn about skipped files, write the report; returns the exit code."""
    paths = list(args.paths or ["results"])
    fmt = choose_format(args.format, args.output)
    target = check_output(args.output)
    catalog = catalog_inputs(paths)
    shown = latest_rows(catalog.rows)
    loaded = Loaded(catalog.load(shown), catalog.warnings, catalog.sources)
    paths = [redact(path) if is_store_url(path) else path for path in paths]  # as printed
    for warning in loaded.warnings:
        print(f"dtbench: warning: {clean_text(warning)}", file=sys.stderr)
    if not loaded.records:
        raise UsageError(f"no records in {clean_text(' '.join(paths))}"
                         + (f" ({len(loaded.warnings)} file(s) skipped)" if loaded.warnings
                            else ""))
    by, runs = getattr(args, "by", None), bool(getattr(args, "runs", False))
    regenerate = regenerate_command(paths, args.format, args.output, by,
                                    getattr(args, "reference", None), runs)
    text = render(loaded, fmt, paths=paths, regenerate=regenerate, by=by,
                  reference=getattr(args, "reference", None),
                  older=len(catalog.rows) - len(shown), runs=runs)
    if target is None:
        _write_stdout(text)
        return 0
    try:
        write_atomic(target, text)
    except OSError as exc:
        raise UsageError(f"-o {args.output}: cannot write ({exc.strerror or exc})") from None
    return 0
