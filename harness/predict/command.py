"""The body of `dtbench predict` (harness/commands/predict.py declares its options): a table
per strategy over the rank counts, the calibration's fits, predictions beside measured runs.

The report `-o` writes is rendered by harness/report, which sits beside predict, not below it:
the command line hands its renderer in (`Renderer`).
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from harness.core.errors import EXIT_OK, UsageError
from harness.core.outputs import json_output, write_json
from harness.store.targets import default_store

DEFAULT_RANKS = "1,2,4,8,16,64,256,1024,4096,10000"
# (prediction records, the -o path, the command that regenerates them) -> the report's text
Renderer = Callable[[list[dict[str, Any]], str, str], str]


def command(args: argparse.Namespace, render_report: Renderer) -> int:
    json_file = json_output(args.json_file, getattr(args, "json_stdout", None))
    if args.calibration:
        return calibration_command(args)
    if args.validate:
        return validate_command(args, json_file, render_report)
    if args.validate_published is not None:
        from harness.predict.published_report import published_command

        return published_command(args.validate_published or None)
    if not args.workload:
        raise UsageError("give a WORKLOAD (or --calibration, or --validate PATH)")
    return predict_command(args, json_file, render_report)


def _calibrate_from(args: argparse.Namespace, default: list[str]) -> tuple[str, ...]:
    from harness.predict.inputs import paths_exist

    return paths_exist(tuple(args.calibrate_from or default))


def predict_command(args: argparse.Namespace, json_target: Any, render_report: Renderer) -> int:
    """A table per strategy over the rank counts; records with --json, a report with -o."""
    from harness.core.files import check_output_file
    from harness.core.text import render_table
    from harness.machine.fingerprint import harness_info
    from harness.predict.inputs import Request, prepare
    from harness.predict.interval import interval_line
    from harness.predict.ranking import rankings
    from harness.predict.records import prediction_record
    from harness.predict.scaleout import predict

    target = None if args.output is None else check_output_file(args.output, "-o")
    strategies = tuple(dict.fromkeys(name.strip() for given in args.strategy or ["ddp"]
                                     for name in given.split(",") if name.strip()))
    request = Request(args.workload, strategies, tuple(args.strategy_opt), args.size,
                      args.precision, args.backend, args.comm, args.network, args.algorithm,
                      args.compute_from, args.compute_rate,
                      tuple(args.calibrate_from or [default_store()]), args.batch_size,
                      args.threads, args.scaling, args.topology, args.compute_curve,
                      args.step_cv, args.step_overhead, args.fusion,
                      getattr(args, "machine", None), run_spread=args.run_spread)
    if (args.network is None and args.topology is None) or all(
            v is None for v in (args.compute_rate, args.compute_from, args.compute_curve)):
        _calibrate_from(args, [default_store()])
    prepared = prepare(request)
    first = next(iter(prepared.contexts.values()))
    for count in args.ranks:
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
        points = ranked[strategy] = predict(ctx, strategy, sorted(set(args.ranks)))
        options = ", ".join(f"{k}={v}" for k, v in sorted(ctx.options.items()))
        print(f"\n{strategy}" + (f" ({options})" if options else ""))
        print(render_table(("ranks", "step ms", "90% step ms", "samples/s", "efficiency",
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
    _write(records, json_target, target, args, render_report)
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
    ranks = ",".join(str(n) for n in args.ranks)
    for flag, value, default in (
            ("--ranks", ranks, DEFAULT_RANKS), ("--network", args.network, None),
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
           args: argparse.Namespace, render_report: Renderer) -> None:
    from harness.core.files import write_atomic

    write_json(json_target, records, allow_nan=False)
    if target is not None:
        write_atomic(target, render_report(records, args.output, _command_line(args)))


def calibration_command(args: argparse.Namespace) -> int:
    """The α-β fits with R² and per-size residuals, and the compute calibrations."""
    from harness.core.text import render_table, size_label
    from harness.predict.calibration import comm_fits, compute_from_record, compute_run
    from harness.predict.inputs import load_calibration
    from harness.predict.overhead import measured_overheads

    warnings: list[str] = []
    records = load_calibration(_calibrate_from(args, [default_store()]), warnings)
    for warning in warnings:
        print(f"dtbench: warning: {warning}", file=sys.stderr)
    fits = comm_fits(records)
    runs = sorted(filter(compute_run, records), key=lambda r: (r["spec"]["workload"],
                                                               r["run_id"]))
    compute = [(r, compute_from_record(r)) for r in runs]
    overheads = measured_overheads(records)
    if not fits and not compute:
        raise UsageError(f"no dtbench comm or single-rank run records in "
                         f"{' '.join(args.calibrate_from or [default_store()])}")
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
        write_json(json_output(args.json_file, getattr(args, "json_stdout", None)), document)
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


def validate_command(args: argparse.Namespace, json_target: Any,
                     render_report: Renderer) -> int:
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
        _write(records, json_target, None, args, render_report)
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

