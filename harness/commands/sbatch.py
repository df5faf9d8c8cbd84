"""`dtbench sbatch`: the options, and the glue that checks `--run`'s options with `dtbench
run`'s own parser; the script itself is written by harness/run/sbatch.py."""
from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any

from harness.commands.options import Parser, RenamedOption, add_output_options, positive_int
from harness.core.errors import UsageError
from harness.core.files import check_output_file
from harness.run.sbatch import DEFAULT_LOG, DEFAULT_TIME, sbatch_script


def _plan(suite: str, run_args: list[str]) -> tuple[Any, list[Any]]:
    """The suite and its planned specs with `run_args` applied (validates both)."""
    from harness.commands.run import _cli_options
    from harness.commands.run import add_arguments as add_run_arguments
    from harness.run.plan import plan_runs
    from harness.run.suites import load_suite

    parser = Parser(prog="dtbench sbatch --run")
    add_run_arguments(parser)
    args = parser.parse_args([suite, *run_args])
    loaded = load_suite(suite)
    return loaded, [spec for spec, _ in plan_runs(loaded, _cli_options(args))]


def write_sbatch(suite: str = "quick", **options: Any) -> str:
    """The text of an sbatch script that runs `suite` (harness.run.sbatch.sbatch_script, whose
    keywords `options` are), its `run_args` checked and planned as `dtbench run` reads them."""
    return sbatch_script(suite, _plan, **options)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `dtbench sbatch` options, on the subparser the CLI creates for it."""
    parser.add_argument("suite", nargs="?", default="quick",
                        help="built-in suite name or TOML file (default: quick)")
    parser.add_argument("--script", metavar="FILE",
                        help="write the script to FILE, executable (default: stdout)")
    parser.add_argument("-o", "--output", dest="script", metavar="FILE", action=RenamedOption,
                        renamed_to="--script")
    parser.add_argument("--nodes", type=positive_int,
                        help="nodes of the job and of every run (default: the suite's largest)")
    parser.add_argument("--ntasks-per-node", type=positive_int,
                        help="ranks per node of the job and of every run (default: the "
                        "suite's largest)")
    parser.add_argument("--cpus-per-task", type=positive_int,
                        help="CPUs (threads) per rank (default: the suite's threads, else 1)")
    parser.add_argument("--gpus-per-node", type=positive_int,
                        help="#SBATCH --gpus-per-node, then whole nodes unless --cpus-per-task "
                        "(default: none, a CPU job)")
    parser.add_argument("--time", default=DEFAULT_TIME, help="#SBATCH --time, the job's limit")
    parser.add_argument("--job-name", help="#SBATCH --job-name (default dtbench-SUITE)")
    parser.add_argument("--partition", help="#SBATCH --partition (default: none, Slurm's "
                        "default partition)")
    parser.add_argument("--account", help="#SBATCH --account (default: none, Slurm's default "
                        "account)")
    parser.add_argument("--log", default=DEFAULT_LOG,
                        help="the job's output file, #SBATCH --output (default "
                             f"{DEFAULT_LOG.replace('%', '%%')})")
    parser.add_argument("--dtbench", default="dtbench",
                        help="the command that starts dtbench on the compute nodes")
    parser.add_argument("--chdir", help="the job's working directory (default: where sbatch "
                        "runs)")
    parser.add_argument("--run", dest="run_options", action="append", default=[],
                        metavar="OPTIONS", help="options for dtbench run, one quoted string "
                        "(--run '--size tiny --steps 20'; --run=-q for one option); repeatable "
                        "(default: none, the suite as it is)")
    add_output_options(parser, "the job's records", quiet=False, title="the job's output",
                       json_dest="job_json_file")


def command(args: argparse.Namespace) -> int:
    """`dtbench sbatch`: print the script, or write it (executable) to --script."""
    try:
        run_args = [arg for text in args.run_options for arg in shlex.split(text)]
    except ValueError as exc:
        raise UsageError(f"--run: {exc}") from None
    script = write_sbatch(
        args.suite, nodes=args.nodes, ntasks_per_node=args.ntasks_per_node,
        cpus_per_task=args.cpus_per_task, gpus_per_node=args.gpus_per_node, time=args.time,
        job_name=args.job_name, log=args.log, partition=args.partition, account=args.account,
        out_dir=args.out, json_file=args.job_json_file, run_args=run_args, dtbench=args.dtbench,
        chdir=args.chdir)
    if not args.script:
        sys.stdout.write(script)
        return 0
    target = check_output_file(args.script, "--script")
    try:
        target.write_text(script, encoding="utf-8")
        target.chmod(0o755)
    except OSError as exc:
        raise UsageError(f"--script {args.script}: cannot write ({exc.strerror or exc})") \
            from None
    print(f"wrote {target}; submit with: sbatch {shlex.quote(str(target))}", file=sys.stderr)
    return 0
