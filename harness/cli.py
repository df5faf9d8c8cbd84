"""The `dtbench` command line (SPEC section 4): parse, dispatch, map errors to exit codes."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, NoReturn

from harness import __version__
from harness.errors import SchemaError, UsageError

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class Parser(argparse.ArgumentParser):
    """argparse whose errors are one line on stderr and exit 2, never a usage dump; options
    must be spelled out (an abbreviation such as `--out` for `--output` is an error)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def int_list(text: str) -> list[int]:
    """'1,2,4' -> [1, 2, 4]; each a positive integer."""
    parts = [p.strip() for p in text.split(",")]
    if not all(parts):
        raise argparse.ArgumentTypeError(
            f"expected a comma list of positive integers, got {text!r}")
    return [positive_int(p) for p in parts]


def percentage(text: str) -> float:
    try:
        value = float(text.rstrip("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a percentage such as 5, got {text!r}") from None
    if not 0 < value < 100:
        raise argparse.ArgumentTypeError(f"expected a percentage above 0 and below 100, "
                                         f"got {text!r}")
    return value


def build_parser() -> Parser:
    from harness.spec import (
        COMM_CHOICES,
        COMPRESSIONS,
        LAUNCHER_CHOICES,
        MODES,
        PRECISIONS,
        SIZES,
    )

    parser = Parser(prog="dtbench", description="Benchmark distributed deep-learning training.")
    parser.add_argument("--version", action="version", version=f"dtbench {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    commands.required = True

    listing = commands.add_parser("list", help="workloads, backends, launchers, suites")
    listing.add_argument("--json", action="store_true", help="machine-readable output")

    describe = commands.add_parser("describe", help="a workload's parameters, FLOPs and target")
    describe.add_argument("workload")
    describe.add_argument("--size", default="full", choices=SIZES)
    describe.add_argument("--json", action="store_true")

    sysinfo = commands.add_parser("sysinfo", help="machine and software fingerprint")
    sysinfo.add_argument("--json", action="store_true")

    peak = commands.add_parser("peak", help="measured GEMM peak FLOP/s and copy bandwidth")
    peak.add_argument("--backend", "-b", default="auto")
    peak.add_argument("--precision", default="fp32", choices=PRECISIONS)
    peak.add_argument("--threads", type=non_negative_int, default=0)
    peak.add_argument("--json", action="store_true")

    comm = commands.add_parser("comm", help="collective microbenchmarks (nccl-tests style)")
    comm.add_argument("--comm", default="gloo", choices=COMM_CHOICES)
    comm.add_argument("--launcher", default="local", choices=LAUNCHER_CHOICES)
    comm.add_argument("-n", "--nproc", type=int_list, default=None, help="ranks per node")
    comm.add_argument("--nnodes", type=positive_int)
    comm.add_argument("--node-rank", type=non_negative_int)
    comm.add_argument("--master-addr")
    comm.add_argument("--master-port", type=positive_int)
    comm.add_argument("--hostfile")
    comm.add_argument("--op", default="allreduce",
                      help="comma list of allreduce, allgather, reducescatter, broadcast")
    comm.add_argument("--sizes", default="1K:64M",
                      help="bytes: 4M, a power-of-two range 1K:64M, or a comma list")
    comm.add_argument("--iters", type=positive_int, default=20)
    comm.add_argument("--warmup", type=non_negative_int, default=5)
    comm.add_argument("--threads", type=positive_int, help="CPU threads per rank (default 1)")
    comm.add_argument("--rank-timeout", type=positive_int, default=120)
    comm.add_argument("--out", default="results")
    comm.add_argument("--json", dest="json_file")
    comm.add_argument("-q", "--quiet", action="store_true")

    from harness.sbatch import add_arguments as add_sbatch_arguments

    sbatch = commands.add_parser("sbatch", help="write an sbatch script that runs a suite")
    add_sbatch_arguments(sbatch)

    report = commands.add_parser("report", help="tables and plots from records and stores")
    report.add_argument("paths", nargs="*", default=["results"], metavar="PATH",
                        help="record files, --json lists, stores or pytest-benchmark JSON "
                        "(default: ./results)")
    report.add_argument("--format", choices=("md", "html", "csv"), default=None,
                        help="default: from the -o suffix, else md")
    report.add_argument("-o", "--output", help="write here instead of stdout")

    compare = commands.add_parser("compare", help="exit 1 on a significant regression")
    compare.add_argument("baseline", help="record file, store or pytest-benchmark JSON")
    compare.add_argument("candidate", help="record file, store or pytest-benchmark JSON")
    compare.add_argument("--threshold", type=percentage, default=5.0,
                         help="regression threshold in percent (default 5)")
    compare.add_argument("--json", dest="json_file", help="also write the comparison here")

    run = commands.add_parser("run", help="run benchmarks, store records, print a summary")
    run.add_argument("suite", nargs="?", default=None,
                     help="built-in suite name or TOML file (default: quick)")
    run.add_argument("-w", "--workload", action="append")
    run.add_argument("-b", "--backend", action="append", help="cpu, cuda or auto")
    run.add_argument("--comm", action="append", choices=COMM_CHOICES)
    run.add_argument("--launcher", choices=LAUNCHER_CHOICES)
    run.add_argument("-n", "--nproc", type=int_list, action="append",
                     help="ranks per node; a comma list such as 1,2,4 runs each")
    run.add_argument("--nnodes", type=positive_int)
    run.add_argument("--node-rank", type=non_negative_int)
    run.add_argument("--master-addr")
    run.add_argument("--master-port", type=positive_int)
    run.add_argument("--hostfile")
    run.add_argument("--bucket-mb", type=positive_int, help="DDP gradient bucket size (MiB)")
    run.add_argument("--compression", choices=COMPRESSIONS,
                     help="gradient compression hook for multi-rank runs")
    run.add_argument("--rank-timeout", type=positive_int, default=120,
                     help="seconds without progress before a rank counts as hung (default 120)")
    run.add_argument("--precision", action="append", choices=PRECISIONS)
    run.add_argument("--size", action="append", choices=SIZES)
    run.add_argument("--batch-size", type=positive_int, help="per rank")
    run.add_argument("--steps", type=positive_int)
    run.add_argument("--warmup", type=non_negative_int)
    run.add_argument("--mode", choices=MODES)
    run.add_argument("--repeat", type=positive_int)
    run.add_argument("--threads", type=positive_int, help="CPU threads per rank")
    run.add_argument("--seed", type=non_negative_int)
    run.add_argument("--compile", action="store_true", default=None, help="torch.compile")
    run.add_argument("--no-channels-last", dest="channels_last", action="store_false",
                     default=None)
    run.add_argument("--data", help="user data: .npz/.h5 images+labels, or text for lstm")
    run.add_argument("--out", default="results", help="results store (default ./results)")
    run.add_argument("--json", dest="json_file", help="also write this run's records here")
    run.add_argument("--resume", action="store_true",
                     help="skip runs that already have success records in the store")
    run.add_argument("-q", "--quiet", action="store_true", help="no progress display")
    return parser


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, default=str))


def cmd_list(args: argparse.Namespace) -> int:
    from backends import COMM_BACKENDS, COMPUTE_BACKENDS, LAUNCHERS
    from harness.collectors import COLLECTORS
    from harness.suites import builtin_names, load_suite
    from workloads import WORKLOADS

    def entries(registry: Any) -> list[dict[str, Any]]:
        out = []
        for name in registry:
            availability = registry.get(name).availability()
            out.append({"name": name, "available": availability.available,
                        "reason": availability.reason})
        return out

    data = {
        "workloads": [{"name": n, "summary": WORKLOADS.get(n).summary,
                       "sizes": list(WORKLOADS.get(n).presets)} for n in WORKLOADS],
        "backends": [{**e, "precisions": list(COMPUTE_BACKENDS.get(e["name"]).precisions)}
                     for e in entries(COMPUTE_BACKENDS)],
        "comm": entries(COMM_BACKENDS),
        "launchers": entries(LAUNCHERS),
        "suites": [{"name": n, "description": load_suite(n).description}
                   for n in builtin_names()],
        "collectors": COLLECTORS.names(),
    }
    if args.json:
        _print_json(data)
        return EXIT_OK
    print("workloads:")
    for w in data["workloads"]:
        print(f"  {w['name']:<10} {w['summary']}  [sizes: {', '.join(w['sizes'])}]")
    for section in ("backends", "comm", "launchers"):
        print(f"{section}:")
        for e in data[section]:
            state = "available" if e["available"] else f"unavailable: {e['reason']}"
            print(f"  {e['name']:<10} {state}")
    print("suites:")
    for s in data["suites"]:
        print(f"  {s['name']:<10} {s['description']}")
    print(f"collectors: {', '.join(data['collectors'])}")
    return EXIT_OK


def cmd_describe(args: argparse.Namespace) -> int:
    from workloads import get_workload

    info = get_workload(args.workload).describe(args.size)
    if args.json:
        _print_json(info)
        return EXIT_OK
    target = info["target"]
    comparison = ">=" if target["higher_is_better"] else "<="
    print(f"{info['workload']} ({info['size']}): {info['summary']}")
    print(f"  parameters        {info['parameters']:,}")
    print(f"  flops_per_sample  {info['flops_per_sample']:,} ({info['flops_per_sample'] / 1e9:.4g}"
          " GFLOP, forward+backward)")
    print(f"  input shape       {tuple(info['input_shape'])}, {info['num_classes']} classes")
    print(f"  default batch     {info['default_batch_size']}")
    print(f"  data (ttt)        {info['data']}")
    print(f"  quality target    {target['metric']} {comparison} {target['value']} "
          f"within {target['max_epochs']} epochs")
    if info["notes"]:
        print(f"  notes             {info['notes']}")
    return EXIT_OK


def cmd_sysinfo(args: argparse.Namespace) -> int:
    from backends import COMPUTE_BACKENDS
    from harness.sysinfo import harness_info, machine_info, software_info

    backends = {}
    for name in COMPUTE_BACKENDS:
        cls = COMPUTE_BACKENDS.get(name)
        availability = cls.availability()
        backends[name] = {"available": availability.available, "reason": availability.reason,
                          **(cls().info() if availability.available else {})}
    data = {"harness": harness_info(), "machine": machine_info(), "software": software_info(),
            "backends": backends}
    if args.json:
        _print_json(data)
        return EXIT_OK
    for section, values in data.items():
        print(f"{section}:")
        for key, value in values.items():
            shown = json.dumps(value, default=str) if isinstance(value, dict | list) else value
            print(f"  {key:<14} {shown}")
    return EXIT_OK


def cmd_peak(args: argparse.Namespace) -> int:
    from backends import COMPUTE_BACKENDS
    from harness.peak import measure_peak, store_peak
    from harness.plan import best_backend

    backend = best_backend() if args.backend == "auto" else args.backend
    cls = COMPUTE_BACKENDS.get(backend)
    if args.precision not in cls.precisions:
        raise UsageError(f"backend {backend} has no {args.precision}; choose from: "
                         f"{', '.join(cls.precisions)}")
    availability = cls.availability()
    if not availability.available:
        print(f"skipped: backend {backend}: {availability.reason}", file=sys.stderr)
        return EXIT_OK
    result = measure_peak(backend, args.precision, args.threads)
    best = store_peak(result)
    if args.json:
        _print_json(result.as_dict())
        return EXIT_OK
    print(f"{backend} {result.device_name} {args.precision}, {result.threads} threads")
    for size, flops in result.per_size.items():
        print(f"  {size:>12}: {flops / 1e9:8.1f} GFLOP/s (median)")
    print(f"  peak now   {result.flops / 1e9:8.1f} GFLOP/s")
    print(f"  copy       {result.memory_bandwidth / 1e9:8.1f} GB/s")
    if best.flops > result.flops:
        print(f"  best so far {best.flops / 1e9:7.1f} GFLOP/s (measured {best.measured_at}; "
              "runs use the best)")
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    from harness.run_command import run_command

    return run_command(args)


def cmd_comm(args: argparse.Namespace) -> int:
    from harness.comm_command import comm_command

    if args.nproc and len(args.nproc) > 1:
        raise UsageError("dtbench comm takes one -n value")
    return comm_command(args)


def cmd_sbatch(args: argparse.Namespace) -> int:
    from harness.sbatch import command

    return command(args)


def cmd_report(args: argparse.Namespace) -> int:
    from harness.report import command

    return command(args)


def cmd_compare(args: argparse.Namespace) -> int:
    from harness.compare import command

    return command(args)


COMMANDS = {"list": cmd_list, "describe": cmd_describe, "sysinfo": cmd_sysinfo,
            "peak": cmd_peak, "run": cmd_run, "comm": cmd_comm, "sbatch": cmd_sbatch,
            "report": cmd_report, "compare": cmd_compare}


def main(argv: list[str] | None = None) -> int:
    from harness.interrupts import Interrupted, stop_signals_raise

    try:
        args = build_parser().parse_args(argv)
        with stop_signals_raise():
            return COMMANDS[args.command](args)
    except (UsageError, SchemaError) as exc:
        print(f"dtbench: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return EXIT_USAGE
    except Interrupted as stop:
        print(f"dtbench: {stop.summary}", file=sys.stderr)
        return stop.exit_code
    except KeyboardInterrupt:
        print("dtbench: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK


def entry_point() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry_point()
