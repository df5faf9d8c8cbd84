"""`dtbench report PATH ...`: tables and plots from records, stores and pytest-benchmark files."""
from __future__ import annotations

import argparse

from harness.commands.options import add_record_paths


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_record_paths(parser)
    parser.add_argument("--format", choices=("md", "html", "csv"), default=None,
                        help="default: from the -o suffix, else md")
    parser.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
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
    from harness.report import command as report_command

    return report_command(args)
