"""`dtbench run`: plan every run first (bad input stops here, nothing written), then run."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, TextIO

from harness.commands.options import (
    LAUNCH_DESTS,
    OUTPUT_DESTS,
    add_launch_options,
    add_output_options,
    json_target,
    regroup,
    write_json,
)
from harness.core.errors import EXIT_FAILED, EXIT_NOTHING_RAN, EXIT_OK, UsageError
from harness.core.interrupts import Interrupted
from harness.records.provenance import Provenance
from harness.run.guard import check_all, check_rendezvous
from harness.run.plan import MULTI_KEYS, plan_runs
from harness.run.progress import Progress
from harness.run.runner import Runner
from harness.run.suites import load_suite
from harness.run.summary_table import precision_warnings, summary_table
from harness.spec.fields import (
    RunField,
    add_options,
    commit_name,
    declared_fields,
    machine_name,
    option_keys,
)
from harness.spec.specs import RUN_FIELDS, LaunchOptions, RunSpec, run_fields
from harness.store.targets import destination, open_writer

# The run options of the command line (launch options apart).
CLI_RUN_KEYS = option_keys(RUN_FIELDS)
# The command's own options: whether to run at all and what the records say of the machine.
COMMAND_FIELDS: tuple[RunField, ...] = (
    RunField("oversubscribe", ("--oversubscribe",), action="store_true", launch=True,
             help="run even when ranks x threads exceed 4x the usable cores or the estimated "
             "memory exceeds the machine's"),
    RunField("machine", ("--machine",), metavar="NAME", launch=True, type=machine_name,
             help="name this machine in the records (default: its CPU's microarchitecture "
             "and cores)",
             doc="name this machine in the records (default: its CPU's microarchitecture and "
             "cores): 1 to 80 letters, digits, spaces and `. _ + # ( ) , : / -`, starting with a "
             "letter or digit (another name is exit 2)"),
    RunField("commit", ("--commit",), launch=True, type=commit_name,
             help="the commit of the code being benchmarked (default: the working "
             "directory's git HEAD)",
             doc="the commit of the code being benchmarked (default: the working directory's "
             "git HEAD): 1 to 100 letters, digits and `. _ + / -`, starting with a letter or "
             "digit (another is exit 2)"),
    RunField("resume", ("--resume",), action="store_true", launch=True,
             help="skip runs that already have success records in the store"),
)


def run_options(spec: type[RunSpec] = RunSpec) -> tuple[RunField, ...]:
    """The options of `dtbench run` that its table in docs/spec/command-line.md lists, in the
    order --help and the table give them: the run's fields, then the command's own; the output
    and launch groups every command that stores records or starts ranks shares are apart
    (harness/commands/options.py; the launch group is LaunchOptions' declaration)."""
    shared = (*OUTPUT_DESTS, *LAUNCH_DESTS)
    return tuple(f for f in (*run_fields(spec), *COMMAND_FIELDS) if f.name not in shared)


def registry_choices() -> dict[str, list[str]]:
    """The choices of options whose names a registry holds (backends/: the comm backends and
    launchers), so a new registered one is a valid option value with no list to edit."""
    from backends import COMM_BACKENDS, LAUNCHERS

    return {"comm": COMM_BACKENDS.names(), "launcher": LAUNCHERS.names()}


def add_arguments(parser: argparse.ArgumentParser, spec: type[RunSpec] = RunSpec) -> None:
    parser.add_argument("suite", nargs="?", default=None,
                        help="built-in suite name or TOML file (default: quick)")
    add_options(parser, run_options(spec), registry_choices())
    add_launch_options(parser)
    regroup(parser, "launch", ("launcher", "nproc", "nnodes"))
    add_output_options(parser, "the records")
    regroup(parser, "output", ("machine", "commit", "resume"))


def strategy_opts(pairs: list[str] | None) -> dict[str, str] | None:
    """--strategy-opt KEY=VALUE (repeatable) as a dict; the strategy types and checks them."""
    if not pairs:
        return None
    found: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise UsageError(f"--strategy-opt {pair!r}: expected KEY=VALUE, e.g. period=4")
        found[key.strip()] = value.strip()
    return found


def merge_repeated(values: list[Any] | None) -> list[Any] | None:
    """A repeated option's values (`-n 1,2 -n 4` arrives as [[1, 2], [4]]) as one list, in
    order, each once; None when the option was not given."""
    if not values:
        return None
    flat: list[Any] = []
    for value in values:
        for item in value if isinstance(value, list) else [value]:
            if item not in flat:
                flat.append(item)
    return flat


def _cli_options(args: argparse.Namespace) -> dict[str, Any]:
    options = {key: getattr(args, key, None) for key in CLI_RUN_KEYS}
    for key in MULTI_KEYS:
        options[key] = merge_repeated(options[key])
    options["strategy_options"] = strategy_opts(args.strategy_options)
    return options


def _preflight_data(specs: list[RunSpec]) -> None:
    """Open each distinct --data path once so a bad dataset is a usage error before any run:
    file formats are indexed and checked (workloads/files), arrays and text loaded."""
    from workloads import get_workload
    from workloads.files import check_dataset, is_file_dataset

    checked: set[tuple[str, str, str]] = set()
    for spec in specs:
        if not spec.data or (spec.workload, spec.size, spec.data) in checked:
            continue
        checked.add((spec.workload, spec.size, spec.data))
        workload = get_workload(spec.workload)
        if is_file_dataset(spec.data):
            check_dataset(workload, spec.size, spec.data)
            continue
        workload.datasets(spec.size, spec.data, spec.seed)  # arrays or text: its own checks
        if spec.mode != "ttt":
            raise UsageError(f"--data {spec.data}: throughput runs read datasets in files "
                             "(an image folder, tar shards, HDF5 or a tokens file: dtbench "
                             "data make); .npz arrays and text are for --mode ttt")


def in_rounds(counts: list[tuple[Any, int]]) -> list[Any]:
    """Repeats round by round (A B C, A B C), not back to back: each spec's runs then sample
    the machine at different times, so their spread shows its run-to-run noise."""
    rounds = max((count for _, count in counts), default=0)
    return [item for index in range(rounds) for item, count in counts if count > index]


def launch_options(args: argparse.Namespace) -> LaunchOptions:
    """The launch options given; those not given keep LaunchOptions' defaults."""
    hostfile = getattr(args, "hostfile", None)
    if hostfile and not Path(hostfile).is_file():
        raise UsageError(f"--hostfile {hostfile}: no such file")
    given = {f.name: (f, getattr(args, f.name, None)) for f in declared_fields(LaunchOptions)}
    # a whole number of seconds on the command line, seconds as a float in the options
    return LaunchOptions(**{name: float(value) if isinstance(f.field_default, float) else value
                            for name, (f, value) in given.items() if value is not None})


def command(args: argparse.Namespace) -> int:
    options = _cli_options(args)
    suite = None
    if args.suite is not None or not options["workload"]:
        suite = load_suite(args.suite or "quick")
    if suite is not None and suite.kernels is not None:
        from harness.commands.kernels import run_kernel_suite

        return run_kernel_suite(suite.name, suite.kernels, args, options)
    planned = plan_runs(suite, options)
    launch = launch_options(args)
    store = open_writer(args.out)
    json_file = json_target(args, store.root)
    _preflight_data([spec for spec, _ in planned])
    check_all([spec for spec, _ in planned], args.oversubscribe)
    for spec, _ in planned:
        check_rendezvous(spec, launch)
    store.ensure_writable()
    store.reconcile_index()

    work = in_rounds([(spec, repeat - (store.count_success(spec.key()) if args.resume else 0))
                      for spec, repeat in planned])
    if args.resume and len(work) < sum(r for _, r in planned):
        print(f"resume: {sum(r for _, r in planned) - len(work)} run(s) already complete in "
              f"{destination(store)}", file=sys.stderr)
    progress = Progress(len(work), enabled=not args.quiet)
    runner = Runner(store, progress, launch, Provenance(args.machine, args.commit))
    records: list[dict[str, Any]] = []
    try:
        for spec in work:
            outcome = runner.run(spec)
            if outcome is not None:
                records.append(outcome.record)
    except Interrupted as stop:
        progress.end(f"interrupted by {stop.signal_name}")
        _show_and_save(records, json_file)
        stop.summary = (f"interrupted by {stop.signal_name} during run {len(records) + 1} of "
                        f"{len(work)}: {len(records)} completed record(s) kept in "
                        f"{destination(store)}, the interrupted run left nothing; add --resume "
                        "to run the rest")
        raise
    _show_and_save(records, json_file)
    if not records:
        print(f"node {runner.launch.node_rank}: ranks finished; node 0 writes the records"
              if work else "nothing to run: every planned run is already complete")
    print(f"records: {destination(store)}", file=sys.stderr)
    if any(r["status"] == "failed" for r in records):
        return EXIT_FAILED
    if records and all(r["status"] == "skipped" for r in records):
        reasons = sorted({str(r["error"]) for r in records})
        print(f"dtbench: nothing ran: every run was skipped ({'; '.join(reasons)})",
              file=sys.stderr)
        return EXIT_NOTHING_RAN
    return EXIT_OK


def _show_and_save(records: list[dict[str, Any]], json_file: Path | TextIO | None) -> None:
    """The summary table of the records made, and the --json file (also when interrupted)."""
    if records:
        print(summary_table(records))
        for line in precision_warnings(records):
            print(f"dtbench: warning: {line}", file=sys.stderr)
    write_json(json_file, records, allow_nan=False)
