"""`dtbench predict`: scale-out prediction from a calibrated analytic model
(docs/guide/prediction.md).

    dtbench predict WORKLOAD --strategy S [--nodes LIST] [--network N] [-o F.html] [--json F]
    dtbench predict --calibration [--calibrate-from PATH ...]
    dtbench predict --validate PATH ... [--calibrate-from PATH ...]
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

from harness.commands.arguments import int_list, positive_int
from harness.commands.options import add_backend_option, add_json_option, json_target, write_json
from harness.core.errors import EXIT_OK, UsageError
from harness.core.spec import PRECISIONS, SIZES

DEFAULT_NODES = "1,2,4,8,16,64,256,1024,4096,10000"


def _rate(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected FLOP/s such as 2e12, got {text!r}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workload", nargs="?", help="the workload to predict")
    from backends import COMM_BACKENDS
    from harness.predict.costs import ALGORITHMS
    from harness.predict.topology import TOPOLOGY_ALGORITHMS
    from harness.strategies import STRATEGIES

    parser.add_argument("--strategy", action="append", metavar="NAME[,NAME...]",
                        help=f"how the runs would be distributed: {', '.join(STRATEGIES)}; "
                        "repeatable or a comma list; two or more are ranked by throughput "
                        "at each node count (default ddp)")
    parser.add_argument("--strategy-opt", action="append", default=[], metavar="KEY=VALUE",
                        help="an option of the strategy, as for dtbench run (repeatable)")
    parser.add_argument("--nodes", type=int_list, default=int_list(DEFAULT_NODES),
                        help="node counts to predict, a comma list")
    parser.add_argument("--network", help="preset (10GbE, ib-100g, aries) or alpha=S,beta=S/B; "
                        "default: fitted from dtbench comm records")
    parser.add_argument("--topology", metavar="SPEC", help="devices=D,intra=LINK,inter=LINK"
                        "[,nics=K] or a JSON file: D devices a node (docs/guide/prediction.md)")
    parser.add_argument("--algorithm", choices=tuple(dict.fromkeys((*ALGORITHMS,
                                                                     *TOPOLOGY_ALGORITHMS))),
                        help="collective algorithm (default ring; auto with --topology)")
    parser.add_argument("--comm", default="gloo", choices=[c for c in COMM_BACKENDS
                                                           if c != "none"],
                        help="backend whose comm records calibrate the network")
    parser.add_argument("--size", default="small", choices=SIZES, help="workload preset")
    parser.add_argument("--precision", default="fp32", choices=PRECISIONS,
                        help="the precision whose calibration prices compute")
    add_backend_option(parser, auto=False, default="cpu",
                       what="the compute backend whose records calibrate")
    parser.add_argument("--batch-size", type=positive_int, help="per rank (weak) or global "
                        "(strong); default: the calibration run's")
    parser.add_argument("--threads", type=positive_int, help="threads per rank to calibrate at")
    parser.add_argument("--scaling", default="weak", choices=("weak", "strong"),
                        help="weak: the batch per rank stays; strong: the global batch stays")
    parser.add_argument("--compute-from", metavar="RECORD",
                        help="take the step's compute time from this record")
    parser.add_argument("--compute-rate", type=_rate, metavar="FLOP/S",
                        help="assumed sustained FLOP/s per rank instead of a measured run")
    parser.add_argument("--compute-curve", metavar="B:RATE,...", help="one device's samples/s "
                        "at per-device batches (published figures), e.g. 32:195,64:219")
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
                        "of DDP buckets (e.g. 64:5, or horovod for 128 MB and 1 ms)")
    parser.add_argument("--validate-published", nargs="?", const="", metavar="FILE",
                        help="predict the published scaling results (built-in table or FILE)")
    parser.add_argument("--calibrate-from", action="append", metavar="PATH",
                        help="records or stores to calibrate from (default ./results)")
    parser.add_argument("--machine", metavar="NAME",
                        help="calibrate from this machine's records (its label as reports "
                        "show it; default: the records of this machine's hardware)")
    parser.add_argument("--calibration", action="store_true", help="print the fits")
    parser.add_argument("--validate", nargs="+", metavar="PATH",
                        help="predict every measured multi-rank run in PATH")
    add_json_option(parser, "the prediction records (with --calibration: the fits)")
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="report of the predictions (.html, .md, .csv)")


def command(args: argparse.Namespace) -> int:
    json_file = json_target(args)
    if args.calibration:
        return calibration_command(args)
    if args.validate:
        return validate_command(args, json_file)
    if args.validate_published is not None:
        from harness.predict.published_report import published_command

        return published_command(args.validate_published or None)
    if not args.workload:
        raise UsageError("give a WORKLOAD (or --calibration, or --validate PATH)")
    return predict_command(args, json_file)


def _calibrate_from(args: argparse.Namespace, default: list[str]) -> tuple[str, ...]:
    from harness.predict.inputs import paths_exist

    return paths_exist(tuple(args.calibrate_from or default))


def predict_command(args: argparse.Namespace, json_target: Any) -> int:
    """A table per strategy over the node counts; records with --json, a report with -o."""
    from harness.core.text import render_table
    from harness.machine.fingerprint import harness_info
    from harness.predict.inputs import Request, prepare
    from harness.predict.interval import interval_line
    from harness.predict.model import predict
    from harness.predict.ranking import rankings
    from harness.predict.records import prediction_record
    from harness.report import check_output

    target = check_output(args.output)
    strategies = tuple(dict.fromkeys(name.strip() for given in args.strategy or ["ddp"]
                                     for name in given.split(",") if name.strip()))
    request = Request(args.workload, strategies, tuple(args.strategy_opt), args.size,
                      args.precision, args.backend, args.comm, args.network, args.algorithm,
                      args.compute_from, args.compute_rate,
                      tuple(args.calibrate_from or ["results"]), args.batch_size, args.threads,
                      args.scaling, args.topology, args.compute_curve, args.step_cv,
                      args.step_overhead, args.fusion, getattr(args, "machine", None),
                      run_spread=args.run_spread)
    if (args.network is None and args.topology is None) or all(
            v is None for v in (args.compute_rate, args.compute_from, args.compute_curve)):
        _calibrate_from(args, ["results"])
    prepared = prepare(request)
    first = next(iter(prepared.contexts.values()))
    for count in args.nodes:
        check = getattr(first.network, "check_ranks", None)
        if check is not None:
            check(count)
    for warning in prepared.warnings:
        print(f"dtbench: warning: {warning}", file=sys.stderr)
    print(f"{first.facts.workload}/{first.facts.size} {first.precision}, batch {first.batch} "
          f"{'per rank' if first.scaling == 'weak' else 'global'} ({first.scaling} scaling)")
    if prepared.chosen.label:
        print(f"calibration: {prepared.chosen.label} ({prepared.chosen.why}): "
              + "; ".join(f"{use} {', '.join(runs)}" for use, runs in _used(prepared)))
    print(f"compute: {first.compute.source}")
    print(f"slowest of the ranks: {first.compute.spread}")
    print(f"intervals: {interval_line(first, prepared.spread)}")
    for measured in first.overheads.values():
        print(f"{measured.strategy}'s own work: {measured.seconds * 1e3:.4g} ms a step "
              f"({measured.source})")
    print(f"network: {first.network.description}, {first.network.algorithm} collectives")
    if first.fusion:
        print(f"gradients: Horovod fusion, {first.fusion[0] / 2**20:g} MB every "
              f"{first.fusion[1] * 1e3:g} ms")
    records, harness, ranked = [], harness_info(), {}
    for strategy, ctx in prepared.contexts.items():
        points = ranked[strategy] = predict(ctx, strategy, sorted(set(args.nodes)))
        options = ", ".join(f"{k}={v}" for k, v in sorted(ctx.options.items()))
        print(f"\n{strategy}" + (f" ({options})" if options else ""))
        print(render_table(("nodes", "step ms", "90% step ms", "samples/s", "efficiency",
                            "comm share", "rank wait ms", "dominant", "note"),
                           [_row(p) for p in points]))
        if any(p.comm_overtakes_compute for p in points):
            print("* communication takes longer than compute (comm time > compute time)")
        records += [prediction_record(ctx, p, prepared.provenance, harness) for p in points]
    if len(ranked) > 1:
        print("\nranked by throughput (samples/s):\n" + "\n".join(
            ranking.line() for ranking in rankings(ranked)))
    print()
    for line in prepared.provenance.assumptions:
        print(f"assumption: {line}")
    _write(records, json_target, target, args)
    return EXIT_OK


def _used(prepared: Any) -> list[tuple[str, tuple[str, ...]]]:
    """The calibration records by use, as the text names them."""
    provenance = prepared.provenance
    return [(use, runs) for use, runs in (("compute", provenance.compute_runs),
                                          ("network", provenance.comm_runs),
                                          ("strategy overhead", provenance.overhead_runs))
            if runs]


def _row(point: Any) -> list[str]:
    from harness.predict.uncertain import interval_text

    estimate = point.estimate
    if estimate is None:
        return [str(point.nodes), "-", "-", "-", "-", "-", "-", "-", point.reason]
    share = estimate.exposed_comm / estimate.step_time if estimate.step_time else 0.0
    mark = "*" if point.comm_overtakes_compute else ""
    return [str(point.nodes), f"{estimate.step_time * 1e3:.4g}",
            interval_text(point.interval, estimate.step_time), f"{estimate.throughput:.4g}",
            f"{point.efficiency:.3f}" if point.efficiency is not None else "-",
            f"{share:.1%}{mark}", f"{point.wait * 1e3:.3g}", estimate.dominant,
            "; ".join(estimate.notes) or "-"]


def _command_line(args: argparse.Namespace) -> str:
    from harness.core.secrets import shown_command

    words = ["dtbench", "predict"]
    if args.validate:
        words += ["--validate", *args.validate]
    elif args.workload:
        words.append(args.workload)
    for strategy in args.strategy or []:
        words += ["--strategy", strategy]
    for pair in args.strategy_opt:
        words += ["--strategy-opt", pair]
    nodes = ",".join(str(n) for n in args.nodes)
    for flag, value, default in (
            ("--nodes", nodes, DEFAULT_NODES), ("--network", args.network, None),
            ("--topology", args.topology, None), ("--algorithm", args.algorithm, None),
            ("--comm", args.comm, "gloo"),
            ("--size", args.size, "small"), ("--precision", args.precision, "fp32"),
            ("--backend", args.backend, "cpu"), ("--batch-size", args.batch_size, None),
            ("--threads", args.threads, None), ("--scaling", args.scaling, "weak"),
            ("--compute-from", args.compute_from, None),
            ("--compute-rate", args.compute_rate, None),
            ("--compute-curve", args.compute_curve, None), ("--step-cv", args.step_cv, 0.0),
            ("--run-spread", args.run_spread, None),
            ("--step-overhead", args.step_overhead, 0.0), ("--fusion", args.fusion, None),
            ("--machine", getattr(args, "machine", None), None)):
        if value is not None and value != default:
            words += [flag, str(value)]
    for path in args.calibrate_from or []:
        words += ["--calibrate-from", path]
    return shown_command(words + (["-o", args.output] if args.output else []))


def _write(records: list[dict[str, Any]], json_target: Any, target: Any,
           args: argparse.Namespace) -> None:
    from harness.core.files import write_atomic

    write_json(json_target, records, allow_nan=False)
    if target is not None:
        from harness.report import choose_format, render
        from harness.store.sources import Loaded

        loaded = Loaded(records=records, sources=[])
        write_atomic(target, render(loaded, choose_format(None, args.output),
                                    paths=["(predictions)"], regenerate=_command_line(args)))


def calibration_command(args: argparse.Namespace) -> int:
    """The α-β fits with R² and per-size residuals, and the compute calibrations."""
    from harness.core.text import render_table, size_label
    from harness.predict.calibration import comm_fits, compute_from_record, compute_run
    from harness.predict.inputs import load_calibration
    from harness.predict.overhead import measured_overheads

    warnings: list[str] = []
    records = load_calibration(_calibrate_from(args, ["results"]), warnings)
    for warning in warnings:
        print(f"dtbench: warning: {warning}", file=sys.stderr)
    fits = comm_fits(records)
    runs = sorted(filter(compute_run, records), key=lambda r: (r["spec"]["workload"],
                                                               r["run_id"]))
    compute = [(r, compute_from_record(r)) for r in runs]
    overheads = measured_overheads(records)
    if not fits and not compute:
        raise UsageError(f"no dtbench comm or single-rank run records in "
                         f"{' '.join(args.calibrate_from or ['results'])}")
    if args.json_file:
        document = {"fits": [{**{k: getattr(fit, k) for k in (
            "comm", "op", "world_size", "link", "alpha", "beta", "r2", "sizes", "times",
            "run_ids")}, "residuals": fit.residuals} for fit in fits],
            "compute": [{"run_id": r["run_id"], "seconds_per_sample": c.seconds_per_sample,
                         **{k: r["spec"].get(k) for k in ("workload", "size", "precision",
                                                          "backend", "threads",
                                                          "batch_per_rank")}}
                        for r, c in compute],
            "overheads": [{**dict(zip(("workload", "size", "precision", "backend"), key,
                                      strict=True)),
                           **{k: getattr(o, k) for k in (
                               "strategy", "seconds", "strategy_step", "compute_step", "batch",
                               "threads", "run_ids")}} for key, o in overheads]}
        write_json(json_target(args), document)
    print("alpha-beta fits, t = alpha + beta * bytes (least squares weighted by 1/t):")
    print(render_table(("comm", "op", "ranks", "link", "alpha us", "beta ns/B", "GB/s", "R2",
                        "worst residual", "sizes"), fit_table_rows(fits)))
    for fit in fits:
        cells = ", ".join(f"{size_label(s, compact=True)} {r * 100:+.0f}%"
                          for s, r in zip(fit.sizes, fit.residuals, strict=True))
        print(f"residuals {fit.comm} {fit.op} x{fit.world_size}: {cells}")
    print("\ncompute, seconds per sample of single-rank runs:")
    print(render_table(("workload", "size", "precision", "backend", "threads", "batch",
                        "ms/sample", "run"),
                       [[str(r["spec"].get(k)) for k in ("workload", "size", "precision",
                                                          "backend", "threads",
                                                          "batch_per_rank")]
                        + [f"{c.seconds_per_sample * 1e3:.4g}", r["run_id"]]
                        for r, c in compute]))
    print("\nstrategies' own work per step: a single-rank run of the strategy (with --comm) "
          "minus the compute at its batch, clipped at 0:")
    if not overheads:
        print("none measured: no single-rank fsdp, zero1 or tensor run with a process group")
        return EXIT_OK
    print(render_table(("workload", "size", "precision", "backend", "threads", "strategy",
                        "batch", "strategy ms", "compute ms", "own work ms", "runs"),
                       [[*key, str(o.threads), o.strategy, str(o.batch),
                         f"{o.strategy_step * 1e3:.4g}", f"{o.compute_step * 1e3:.4g}",
                         f"{o.seconds * 1e3:.4g}", " ".join(o.run_ids)]
                        for key, o in overheads]))
    return EXIT_OK


def _overhead_runs(ctx: Any, strategy: str) -> tuple[str, ...]:
    """The single-rank runs that measured the strategy's own work, where they priced it."""
    measured = ctx.overheads.get(strategy)
    return measured.run_ids if measured is not None else ()


def validate_command(args: argparse.Namespace, json_target: Any) -> int:
    """Predicted against measured step time for every multi-rank run in the paths."""
    from harness.core.text import render_table
    from harness.machine.fingerprint import harness_info
    from harness.predict.inputs import load_calibration
    from harness.predict.records import Provenance, prediction_record
    from harness.predict.validate import HEADER, summary, table_rows, validate

    warnings: list[str] = []
    measured = load_calibration(tuple(args.validate), warnings)
    calibration = load_calibration(_calibrate_from(args, args.validate), warnings)
    for warning in warnings:
        print(f"dtbench: warning: {warning}", file=sys.stderr)
    rows = validate(measured, calibration, args.algorithm or "ring")
    if not rows:
        raise UsageError(f"no successful multi-rank run records in {' '.join(args.validate)}")
    print(render_table(HEADER, table_rows(rows)))
    print(summary(rows))
    if json_target is not None:
        harness = harness_info()
        records = [prediction_record(row.ctx, row.point, Provenance(
            comm=str(row.record["spec"].get("comm")), compute_runs=row.ctx.compute.run_ids,
            created_at=row.record["created_at"], machine=row.record.get("machine", {}),
            overhead_runs=_overhead_runs(row.ctx, row.strategy)),
            harness, extra={"validation": {"measured_run_id": row.record["run_id"],
                                           "measured_step_time": row.measured,
                                           "error": row.error}})
            for row in rows if row.ctx is not None and row.point is not None]
        _write(records, json_target, None, args)
    return EXIT_OK


def fit_table_rows(fits: list[Any]) -> list[list[str]]:
    """Rows for `dtbench predict --calibration`: one per fit, with its worst residual."""
    rows = []
    for fit in fits:
        worst = max(fit.residuals, key=abs)
        rows.append([fit.comm, fit.op, str(fit.world_size), fit.link, f"{fit.alpha * 1e6:.2f}",
                     f"{fit.beta * 1e9:.4f}", f"{1 / fit.beta / 1e9:.3f}" if fit.beta else "inf",
                     f"{fit.r2:.4f}", f"{worst * 100:+.0f}%", str(len(fit.sizes))])
    return rows

