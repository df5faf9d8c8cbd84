"""`dtbench predict`: scale-out prediction from a calibrated analytic model
(docs/guide/prediction.md).

    dtbench predict WORKLOAD --strategy S [--ranks LIST] [--network N] [-o F.html] [--json F]
    dtbench predict --calibration [--calibrate-from PATH ...]
    dtbench predict --validate PATH ... [--calibrate-from PATH ...]
"""
from __future__ import annotations

import argparse
from typing import Any

from harness.commands.options import (
    RenamedOption,
    add_backend_option,
    add_json_option,
    add_output_file,
    int_list,
    positive_int,
)
from harness.predict.command import DEFAULT_RANKS
from harness.spec.specs import PRECISIONS, SIZES


def _rate(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected FLOP/s such as 2e12, got {text!r}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workload", nargs="?", help="the workload to predict (default: none; "
                        "--calibration and --validate take none)")
    from backends import COMM_BACKENDS
    from harness.predict.costs import ALGORITHMS
    from harness.predict.topology import TOPOLOGY_ALGORITHMS
    from harness.report import SUFFIXES
    from harness.strategies import STRATEGIES

    parser.add_argument("--strategy", action="append", metavar="NAME[,NAME...]",
                        help=f"how the runs would be distributed: {', '.join(STRATEGIES)}; "
                        "repeatable or a comma list; two or more are ranked by throughput "
                        "at each rank count (default ddp)")
    parser.add_argument("--strategy-opt", action="append", default=[], metavar="KEY=VALUE",
                        help="an option of the strategy, as for dtbench run (repeatable; "
                        "default: the strategy's own, dtbench list names them)")
    parser.add_argument("--ranks", type=int_list, default=int_list(DEFAULT_RANKS),
                        metavar="LIST",
                        help="rank counts (devices) to predict, a comma list")
    parser.add_argument("--nodes", dest="ranks", type=int_list, metavar="LIST",
                        action=RenamedOption, renamed_to="--ranks",
                        help="the older spelling of --ranks, deprecated: it counts ranks, where "
                        "sbatch's --nodes counts nodes (default: as --ranks)")
    parser.add_argument("--network", help="preset (10GbE, ib-100g, aries) or alpha=S,beta=S/B; "
                        "default: fitted from dtbench comm records")
    parser.add_argument("--topology", metavar="SPEC", help="devices=D,intra=LINK,inter=LINK"
                        "[,nics=K] or a JSON file: D devices a node (docs/guide/prediction.md; "
                        "default: none, one flat network)")
    parser.add_argument("--algorithm", choices=tuple(dict.fromkeys((*ALGORITHMS,
                                                                     *TOPOLOGY_ALGORITHMS))),
                        help="collective algorithm (default ring; auto with --topology)")
    parser.add_argument("--comm", default="gloo", choices=[c for c in COMM_BACKENDS
                                                           if c != "none"],
                        help="the backend whose comm records calibrate the network")
    parser.add_argument("--size", default="small", choices=SIZES, help="workload preset")
    parser.add_argument("--precision", default="fp32", choices=PRECISIONS,
                        help="the precision whose calibration prices compute")
    add_backend_option(parser, auto=False, default="cpu",
                       what="the compute backend whose records calibrate")
    parser.add_argument("--batch-size", type=positive_int, help="per rank (weak) or global "
                        "(strong); default: the calibration run's")
    parser.add_argument("--threads", type=positive_int, help="threads per rank to calibrate at "
                        "(default: the calibration run's)")
    parser.add_argument("--scaling", default="weak", choices=("weak", "strong"),
                        help="weak: the batch per rank stays; strong: the global batch stays")
    parser.add_argument("--compute-from", metavar="RECORD",
                        help="take the step's compute time from this record (default: none, the "
                        "calibration's single-rank runs)")
    parser.add_argument("--compute-rate", type=_rate, metavar="FLOP/S",
                        help="assumed sustained FLOP/s per rank instead of a measured run "
                        "(default: none, measured)")
    parser.add_argument("--compute-curve", metavar="B:RATE,...", help="one device's samples/s "
                        "at per-device batches (published figures), e.g. 32:195,64:219 "
                        "(default: none, measured)")
    parser.add_argument("--step-cv", type=float, default=0.0, metavar="CV",
                        help="step-time coefficient of variation: a synchronous step waits "
                        "for the expected slowest of its ranks (default: estimated from 30 or "
                        "more measured steps, else the wait is not priced)")
    parser.add_argument("--run-spread", type=float, metavar="CV",
                        help="between-run spread of the compute calibration (sd of the log of "
                        "runs' median steps) for the 90%% intervals (default: from the "
                        "calibration's repeats, else the machine's repeated single-rank runs, "
                        "else not in the interval)")
    parser.add_argument("--step-overhead", type=float, default=0.0, metavar="SECONDS",
                        help="framework and optimizer time a step, whatever the batch")
    parser.add_argument("--fusion", metavar="MB:CYCLE_MS", help="Horovod tensor fusion instead "
                        "of DDP buckets (e.g. 64:5, or horovod for 128 MB and 1 ms; default: "
                        "none, DDP buckets)")
    parser.add_argument("--validate-published", nargs="?", const="", metavar="FILE",
                        help="predict the published scaling results (FILE, default: the built-in "
                        "table)")
    parser.add_argument("--calibrate-from", action="append", metavar="PATH",
                        help="records or stores to calibrate from (repeatable; default: with "
                        "--validate its PATHs, else the store dtbench run writes, $DTBENCH_STORE "
                        "if set, else ./.dtbench)")
    parser.add_argument("--machine", metavar="NAME",
                        help="calibrate from this machine's records (its label as reports "
                        "show it; default: the records of this machine's hardware)")
    parser.add_argument("--calibration", action="store_true", help="print the fits")
    parser.add_argument("--validate", nargs="+", metavar="PATH",
                        help="predict every measured multi-rank run in PATH (default: none)")
    add_json_option(parser, "the prediction records (with --calibration: the fits)")
    add_output_file(parser, "a report of the predictions", SUFFIXES)


def command(args: argparse.Namespace) -> int:
    from harness.predict.command import command as predict_command

    return predict_command(args, render_report)


def render_report(records: list[dict[str, Any]], output: str, regenerate: str) -> str:
    """The predictions as a report, in the format the -o suffix names."""
    from harness.report import choose_format, render
    from harness.store.sources import Loaded

    return render(Loaded(records=records, sources=[]), choose_format(None, output),
                  paths=["(predictions)"], regenerate=regenerate)
