"""`dtbench report [PATH ...]`: tables and plots from records, stores and pytest-benchmark
files."""
from __future__ import annotations

import argparse
from pathlib import Path

from harness.commands.options import add_output_file, add_record_paths, check_default_store


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from harness.report import FORMATS, SUFFIXES

    add_record_paths(parser)
    parser.add_argument("--format", choices=FORMATS, default=None,
                        help="default: from the -o suffix, else md")
    add_output_file(parser, "the report", SUFFIXES)
    parser.add_argument("--by", choices=("machine", "record"), default=None,
                        help="machine: rows of experiments, one column per machine; record: a "
                        "row per record (default: machine with two machines or more that "
                        "trained, else record)")
    parser.add_argument("--runs", action="store_true",
                        help="end the Markdown with the run ids of every record (default: "
                        "left out; the HTML keeps them collapsed)")
    parser.add_argument("--reference", metavar="MACHINE",
                        help="with --by machine, the machine the others are compared with "
                        "(default: the identified machine with the most records)")


def command(args: argparse.Namespace) -> int:
    from harness.core.errors import UsageError
    from harness.report import SUFFIXES
    from harness.report import command as report_command

    check_default_store(args.paths)
    named = SUFFIXES[Path(args.output).suffix.lower()] if args.output else None
    if named is not None and args.format not in (None, named):
        raise UsageError(f"-o {args.output} names {named} and --format {args.format}: never a "
                         "file whose name says another format than it holds; give one of them")
    return report_command(args)
