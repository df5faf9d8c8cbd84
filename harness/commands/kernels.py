"""`dtbench kernels`: kernel microbenchmarks with a roofline (docs/guide/kernels.md); one record per
kernel, pass and algorithm, stored as it is made."""
from __future__ import annotations

import argparse
import sys
from typing import Any

from harness.commands.options import (
    add_backend_option,
    add_output_options,
    add_threads_option,
    json_target,
    write_json,
)
from harness.core.errors import UsageError
from harness.core.interrupts import Interrupted
from harness.core.text import render_table
from harness.microbench.kernels.sets import DEFAULT_SET, SETS, KernelSet, get_set
from harness.run.progress import Progress
from harness.spec.specs import PRECISIONS
from harness.store.targets import destination, open_writer


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--set", dest="kernel_set", default=DEFAULT_SET,
                        help=f"kernel set: {', '.join(SETS)} (default {DEFAULT_SET})")
    add_run_options(parser)


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """The options `dtbench kernels` shares with `dtbench run kernels`."""
    parser.add_argument("--precision", action="append", choices=PRECISIONS,
                        help="repeatable (default fp32)")
    add_backend_option(parser)
    add_threads_option(parser, per_rank=False)
    add_output_options(parser, "the records")


def _backend(name: str, precisions: list[str]) -> str:
    from backends import COMPUTE_BACKENDS
    from harness.run.plan import best_backend

    backend = best_backend() if name == "auto" else name
    cls = COMPUTE_BACKENDS.get(backend)
    for precision in precisions:
        if precision not in cls.precisions:
            raise UsageError(f"backend {backend} has no {precision}; choose from: "
                             f"{', '.join(cls.precisions)}")
    availability = cls.availability()
    if not availability.available:
        raise UsageError(f"backend {backend} is not available here: {availability.reason}")
    return backend


def summary(records: list[dict[str, Any]]) -> str:
    """The kernel tables of the records made, as plain text for the terminal."""
    from harness.report.kernels import kernel_section
    from harness.report.view import views_of

    section = kernel_section(views_of(records))
    if section is None:
        return "no kernel records"
    parts = []
    for table in section.tables:
        parts += [table.title, render_table(table.columns, table.rows)]
        parts += [f"  {note}" for note in table.notes]
        parts.append("")
    return "\n".join(parts).rstrip("\n")


def run_kernels(kernel_set: KernelSet, args: argparse.Namespace) -> int:
    """Measure the set at each precision, storing each record as it is made; exit 1 if a
    kernel failed (not-applicable ones are skipped, not failed)."""
    from harness.machine.fingerprint import harness_info, machine_info, software_info
    from harness.microbench.kernels.records import kernel_record
    from harness.microbench.kernels.runner import (
        KernelRunner,
        Measurement,
        Step,
        planned_steps,
    )
    from harness.records.record import new_run_id, utc_now

    precisions = list(dict.fromkeys(args.precision or ["fp32"]))
    backend = _backend(args.backend, precisions)
    store = open_writer(args.out)
    json_file = json_target(args, store.root)
    store.ensure_writable()
    total = planned_steps(kernel_set.cases()) * len(precisions)
    progress = Progress(total, enabled=not args.quiet)
    created = utc_now()
    base_id = new_run_id("kernels", created)
    context = {"harness": harness_info(), "machine": machine_info(),
               "software": software_info()}
    records: list[dict[str, Any]] = []

    def show(step: Step, measured: Measurement | None) -> None:
        if measured is None:
            progress.begin(step.label)
        else:
            progress.end(measured.status if measured.error is None
                         else f"{measured.status}: {measured.error}")

    try:
        for precision in precisions:
            runner = KernelRunner(kernel_set, precision, backend, args.threads, show)
            for measured in runner.run():
                record = kernel_record(measured, runner.roofs,
                                       run_id=f"{base_id}-{len(records) + 1:04d}",
                                       created=created, kernel_set=kernel_set, backend=backend,
                                       threads=runner.threads, **context)
                store.add(record)
                records.append(record)
    except Interrupted as stop:
        write_json(json_file, records, allow_nan=False)
        stop.summary = (f"interrupted by {stop.signal_name} during kernel {len(records) + 1} "
                        f"of {total}: {len(records)} completed record(s) kept in "
                        f"{destination(store)}")
        raise
    print(summary(records))
    write_json(json_file, records, allow_nan=False)
    print(f"records: {destination(store)}", file=sys.stderr)
    return 1 if any(record["status"] == "failed" for record in records) else 0


def command(args: argparse.Namespace) -> int:
    return run_kernels(get_set(args.kernel_set), args)


SUITE_OPTIONS = ("precision", "backend", "threads")


def run_kernel_suite(name: str, kernels: dict[str, Any], args: argparse.Namespace,
                     options: dict[str, Any]) -> int:
    """`dtbench run SUITE` for a suite with a [kernels] table: its set, at the suite's
    precisions unless --precision is given; training options do not apply."""
    given = [key for key, value in options.items() if value is not None
             and key not in SUITE_OPTIONS] + (["resume"] if args.resume else [])
    if given:
        raise UsageError(f"suite {name} runs kernel benchmarks: --{given[0].replace('_', '-')} "
                         "does not apply (use --precision, --threads, -b, --out, --json, -q)")
    backends = options["backend"] or ["auto"]
    if len(backends) > 1:
        raise UsageError(f"suite {name} runs kernel benchmarks on one backend; got "
                         f"{', '.join(backends)}")
    kernel_args = argparse.Namespace(
        precision=options["precision"] or kernels["precision"], backend=backends[0],
        threads=options["threads"] or 0, out=args.out, json_file=args.json_file,
        json_stdout=getattr(args, "json_stdout", None), quiet=args.quiet)
    return run_kernels(get_set(kernels["set"]), kernel_args)
