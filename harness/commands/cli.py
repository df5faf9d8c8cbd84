"""The `dtbench` command line (docs/spec/command-line.md): one module per subcommand, each with
`add_arguments(parser)` and `command(args) -> exit code`; this module parses, dispatches and
maps errors to exit codes."""
from __future__ import annotations

import sys
import traceback
from importlib import import_module
from typing import Any

from harness import __version__
from harness.commands.options import ParseError, Parser
from harness.core.errors import EXIT_OK, EXIT_USAGE, SchemaError, UsageError

# name -> (module under harness.commands, one-line help), in the order `dtbench -h` lists them
SUBCOMMANDS = {
    "list": ("listing", "workloads, backends, strategies, launchers, suites"),
    "describe": ("describe", "a workload's parameters, FLOPs and target"),
    "sysinfo": ("sysinfo", "machine and software fingerprint"),
    "peak": ("peak", "measured GEMM peak FLOP/s and copy bandwidth"),
    "doctor": ("doctor", "check this node, or compare a fleet's nodes, before trusting figures"),
    "run": ("run", "run benchmarks, store records, print a summary"),
    "comm": ("comm", "collective microbenchmarks (nccl-tests style)"),
    "kernels": ("kernels", "kernel microbenchmarks with a roofline (DeepBench style)"),
    "report": ("report", "tables and plots from records and stores"),
    "compare": ("compare", "compare a baseline with a candidate; exit 1 on a significant "
                           "regression"),
    "gate": ("gate", "the CI performance gate: run this change and compare it with the "
                     "runner's history or the merge base; exit 1 on a regression"),
    "history": ("history", "a metric over commits per machine, with its change points"),
    "publish": ("publish", "a static site of machines, workloads, trends and records"),
    "predict": ("predict", "scale-out prediction from a calibrated model"),
    "sbatch": ("sbatch", "write an sbatch script that runs a suite"),
    "store": ("store", "export a PostgreSQL store, or import records into one"),
    "data": ("data", "write datasets in file formats; measure the input pipeline alone"),
}

# Commands that rewrite a progress line in place (harness/run/progress.py): their streams keep
# control characters; what they print is what they measured, not a stored record.
PROGRESS_COMMANDS = frozenset({"run", "comm", "kernels"})


def build_parser(command: str | None = None, *, options: bool = True) -> Parser:
    """The command line; with `command`, only that subcommand's options are declared (each
    declaration imports its module: `run`'s imports torch, which store commands such as
    report and publish need not wait 1.5 s for); without `options`, none (the command list)."""
    parser = Parser(prog="dtbench", description="Benchmark distributed deep-learning training.",
                    epilog="dtbench COMMAND -h shows a command's options with their defaults.")
    parser.add_argument("--version", action="version", version=f"dtbench {__version__}")
    # not required here: a misspelt option before the command (`dtbench --verison`) is then
    # answered with its nearest spelling, not "COMMAND is required" (main checks the command)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser,
                                     title="commands")
    for name, (module, help_text) in SUBCOMMANDS.items():
        subparser = commands.add_parser(name, help=help_text,
                                        description=f"dtbench {name}: {help_text}.")
        if options and (command is None or name == command):
            import_module(f"harness.commands.{module}").add_arguments(subparser)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command line; its exit code. Everything it prints is masked: no message or
    warning shows a password given on the command line; and but for the commands that draw
    their own progress display, nothing a record holds reaches the terminal as a control
    character or escape sequence."""
    from harness.core.outputs import terminal_stream
    from harness.core.secrets import masked_stream, secrets_in

    given = sys.argv[1:] if argv is None else argv
    secrets = secrets_in(given)
    streams = sys.stdout, sys.stderr
    if not (given and given[0] in PROGRESS_COMMANDS):
        sys.stdout, sys.stderr = terminal_stream(sys.stdout), terminal_stream(sys.stderr)
    sys.stdout, sys.stderr = masked_stream(sys.stdout, secrets), masked_stream(sys.stderr, secrets)
    try:
        return _dispatch(given, argv)
    finally:
        sys.stdout, sys.stderr = streams


def _dispatch(given: list[str], argv: list[str] | None) -> int:
    from harness.commands.options import json_owns_stdout
    from harness.core.interrupts import Interrupted, stop_signals_raise
    from harness.core.outputs import clean_text

    if not given:  # like git: what there is to run, on stderr, and the usage exit code
        print(build_parser(options=False).format_help(), end="", file=sys.stderr)
        return EXIT_USAGE
    named = given[0] if given[0] in SUBCOMMANDS else None
    try:
        # no command named: -h, --version or a mistake, none of which needs a command's options
        args = build_parser(named, options=named is not None).parse_args(argv)
        if args.command is None:
            raise ParseError("the following arguments are required: COMMAND", "dtbench")
        with stop_signals_raise(), json_owns_stdout(args):
            module = import_module(f"harness.commands.{SUBCOMMANDS[args.command][0]}")
            return int(module.command(args))
    except (UsageError, SchemaError) as exc:
        prog = getattr(exc, "prog", None) or (f"dtbench {named}" if named else "dtbench")
        print(f"{prog}: error: {clean_text(exc, 4000)}", file=sys.stderr)
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
    """`dtbench`: main, with the traceback of a bug masked and filtered too (Python prints it
    after main has given the streams back; its message may quote a record's text)."""
    from harness.core.outputs import terminal_stream_text
    from harness.core.secrets import mask, secrets_in

    secrets = secrets_in(sys.argv[1:])

    def masked_traceback(kind: Any, value: Any, trace: Any) -> None:
        text = mask("".join(traceback.format_exception(kind, value, trace)), secrets)
        sys.stderr.write(terminal_stream_text(text))

    sys.excepthook = masked_traceback
    sys.exit(main())


if __name__ == "__main__":
    entry_point()
