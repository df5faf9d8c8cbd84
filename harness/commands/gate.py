"""`dtbench gate [record]`: the CI performance gate of a change (harness/compare/gate.py)."""
from __future__ import annotations

import argparse
from pathlib import Path

from harness.commands.compare import add_clock, add_floor_decides, add_threshold
from harness.commands.options import non_negative_int, positive_int


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from harness.compare.gate import BASES, GATE_RUN
    from harness.spec.fields import positive_float

    parser.add_argument("action", nargs="?", choices=("record",), metavar="record",
                        help="run the benchmarks into the history store (a push to the target "
                        "branch) instead of gating this change (default: none, gate this "
                        "change)")
    parser.add_argument("--run", default=GATE_RUN, metavar="ARGS",
                        help="what `dtbench run` runs on each side, as one string (default: "
                        f"{GATE_RUN})")
    parser.add_argument("--target-branch", default="main", metavar="BRANCH",
                        help="the branch the history holds and the merge base is taken with "
                        "(default main)")
    parser.add_argument("--history", default="history", metavar="STORE",
                        help="the runner's history store: a directory the CI caches, or a "
                        "postgresql:// URL (default ./history)")
    parser.add_argument("--summary", default="summary.md", type=Path, metavar="FILE",
                        help="the Markdown summary, also appended to $GITHUB_STEP_SUMMARY "
                        "where set (default summary.md)")
    parser.add_argument("--candidate", default="candidate", type=Path, metavar="DIR",
                        help="where this change's records go; new or empty (default "
                        "./candidate)")
    parser.add_argument("--baseline", default="baseline", type=Path, metavar="DIR",
                        help="where the baseline's records go when it runs here; new or empty "
                        "(default ./baseline)")
    add_threshold(parser)
    add_clock(parser)
    add_floor_decides(parser)
    parser.add_argument("--base", choices=BASES, default=BASES[0],
                        help="the commit a baseline run here is made of: the merge base of HEAD "
                        "and the target branch, or the target branch's tip (default merge-base)")
    parser.add_argument("--interleave", type=non_negative_int, default=0, metavar="N",
                        help="run the base (a worktree of --base) and this change N times each, "
                        "alternating as fresh processes, and compare them instead of the "
                        "history (default 0: against the history)")
    parser.add_argument("--repeat", type=positive_int, metavar="N",
                        help="runs of each workload per invocation, each in fresh processes "
                        "(default: as --run says)")
    parser.add_argument("--max-time", type=positive_float, metavar="SECONDS",
                        help="each run's budget of measured steps (default: as --run says, "
                        "else dtbench run's)")
    parser.add_argument("--baseline-here", action="store_true",
                        help="a baseline run here runs this checkout's code instead of a "
                        "worktree of the merge base (for testing the gate)")


def command(args: argparse.Namespace) -> int:
    from harness.compare.gate import GateOptions, gate, record

    options = GateOptions(
        run=args.run, target_branch=args.target_branch, history=args.history,
        summary=args.summary, candidate=args.candidate, baseline=args.baseline,
        threshold=float(args.threshold), base=args.base, interleave=args.interleave,
        repeat=args.repeat, max_time=args.max_time, baseline_here=args.baseline_here,
        clock=args.clock, floor_decides=args.floor_decides)
    return record(options) if args.action == "record" else gate(options)
