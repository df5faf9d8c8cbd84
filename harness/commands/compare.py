"""`dtbench compare [BASELINE CANDIDATE]`: exit 1 on a significant regression."""
from __future__ import annotations

import argparse

from harness.commands.options import add_json_option, json_target, percentage, write_json


def add_threshold(parser: argparse.ArgumentParser) -> None:
    """--threshold: the smallest change called a regression (compare's, and the gate's)."""
    parser.add_argument("--threshold", type=percentage, default=5.0, metavar="PCT",
                        help="regression threshold in percent (default 5)")


def add_clock(parser: argparse.ArgumentParser, default: str = "wall") -> None:
    """--clock: what a step's time is read on (compare's, and the gate's)."""
    from harness.compare.clock import CLOCKS

    parser.add_argument("--clock", choices=CLOCKS, default=default,
                        help="read each step on this clock: wall (as recorded), cpu (the CPU "
                        "seconds of every thread of the ranks' processes) or probe (the wall "
                        "time over the speed probe timed after each step, for runs with "
                        "--speed-probe: steadier on a shared VM); records without the "
                        f"clock's figure are left out (default {default})")


def add_floor_decides(parser: argparse.ArgumentParser) -> None:
    """--floor-decides: how a history's floor decides a change (compare's, and the gate's)."""
    parser.add_argument("--floor-decides", action="store_true",
                        help="against a store's history: a change of the runs' medians beyond "
                        "the threshold and the history's floor is a regression even where the "
                        "runs' interval spans 1 (with 2-3 runs a side it spans 1 unless every "
                        "run of one side is slower); metrics without a floor are decided as "
                        "before; more power, measured in docs/measurements/ci-gate.md "
                        "(default off)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("baseline", nargs="?",
                        help="record file, store or pytest-benchmark JSON (default: with no "
                        "CANDIDATE either, the version of the code before the newest in the "
                        "store `run` writes)")
    parser.add_argument("candidate", nargs="?",
                        help="record file, store or pytest-benchmark JSON (default: the newest "
                        "version of the code in that store, on the machine of its newest "
                        "record)")
    add_threshold(parser)
    add_clock(parser)
    add_floor_decides(parser)
    add_json_option(parser, "the comparison")
    parser.add_argument("--format", choices=("text", "md"), default="text",
                        help="md: a Markdown summary for a pull-request comment or "
                        "$GITHUB_STEP_SUMMARY (default text)")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="also the diagnostics (phase times, FLOP/s, MFU, state per rank) "
                        "and untested metrics, and the experiments one side lacks by name "
                        "(default: the gated metrics, the others counted)")
    parser.add_argument("--trajectory", action="store_true",
                        help="compare the two runs' per-step losses instead: the largest "
                        "difference and the first step where they diverge (exit 1)")
    parser.add_argument("--tolerance", type=float, default=None, metavar="T",
                        help="with --trajectory: a step differs beyond T x max(1, |loss|) "
                        "(default: beyond the rounding bound of the runs' precision at that "
                        "step)")
    parser.add_argument("--allow-different-hardware", action="store_true",
                        help="compare records from different CPUs or GPUs (a hardware "
                        "comparison) instead of refusing")
    parser.add_argument("--match-on", metavar="FIELDS",
                        help="match records on these spec fields only (comma list, e.g. "
                        "workload,size,precision), to compare across an intended difference "
                        "such as threads (default: every identity field)")
    chosen = parser.add_mutually_exclusive_group()
    chosen.add_argument("--baseline-branch", metavar="BRANCH",
                        help="take from the baseline store, per experiment, the latest good "
                        "result of the candidate's machine on BRANCH (default: none, BASELINE "
                        "as it is)")
    chosen.add_argument("--baseline-commit", metavar="COMMIT",
                        help="take from the baseline store the candidate's machine's "
                        "results at COMMIT, a prefix of at least 7 hex digits (default: none)")
    chosen.add_argument("--baseline-merge-base", metavar="REF",
                        help="take from the baseline store the candidate's machine's "
                        "results at `git merge-base REF HEAD` of the working directory "
                        "(default: none)")


def command(args: argparse.Namespace) -> int:
    from harness.compare.command import command as compare_command

    target = json_target(args)
    code, document = compare_command(args)
    write_json(target, document, allow_nan=False)
    return code
