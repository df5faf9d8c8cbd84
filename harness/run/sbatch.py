"""sbatch scripts that run a suite through the slurm launcher (docs/guide/running.md).

The script asks Slurm for an allocation big enough for the suite's largest run (or the size
given), then runs `dtbench run SUITE --launcher slurm ...` as the batch step: dtbench plans the
suite on the first node of the allocation and starts each multi-rank run's ranks with `srun`.
Single-rank runs execute in the batch step itself.

    #!/bin/bash
    #SBATCH --job-name=dtbench-quick
    #SBATCH --nodes=1
    #SBATCH --ntasks-per-node=2
    #SBATCH --cpus-per-task=1
    #SBATCH --time=01:00:00
    #SBATCH --output=dtbench-%x-%j.out
    set -eu
    exec dtbench run quick --launcher slurm --threads 1 --out .dtbench -q

`harness/commands/sbatch.py` declares the `dtbench sbatch` options and checks `--run`'s options
with `dtbench run`'s own parser (the `plan` that `sbatch_script` is given).
"""
from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from harness import __version__
from harness.core.errors import UsageError
from harness.spec.kinds import TRAINING
from harness.store.targets import default_store
from harness.store.url import is_store_url, redact

DEFAULT_TIME = "01:00:00"
DEFAULT_LOG = "dtbench-%x-%j.out"
# Slurm's time formats: minutes, minutes:seconds, hours:minutes:seconds, days-hours,
# days-hours:minutes, days-hours:minutes:seconds; or no limit.
TIME_RE = re.compile(r"^(\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d{1,2}(:\d{1,2}){0,2}"
                     r"|UNLIMITED|INFINITE)$")
# `dtbench run` options the script sets itself (from the allocation) and that run_args
# therefore must not repeat.
RESERVED_RUN_OPTIONS = {
    "--launcher": "the script always uses --launcher slurm",
    "--threads": "set it with cpus_per_task (--cpus-per-task)",
    "--out": "set it with out_dir (--out)",
    "--json": "set it with json_file (--json)",
    "--node-rank": "srun places the ranks; there is one dtbench process per job",
    "--master-addr": "the script uses the batch host",
    "--master-port": "dtbench picks a free port",
    "--hostfile": "Slurm's allocation decides the hosts",
}


def _check_token(what: str, value: str) -> str:
    """A value for an #SBATCH line: non-empty, no white space (sbatch splits on it)."""
    if not value or any(ch.isspace() for ch in value) or "\0" in value:
        raise UsageError(f"sbatch {what} {value!r}: must be non-empty, without spaces")
    return value


def _check_positive(what: str, value: int | None) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                              or value < 1):
        raise UsageError(f"sbatch {what} must be a positive integer, got {value!r}")


def _option_name(arg: str) -> str:
    return arg.split("=", 1)[0]


def _check_run_args(run_args: Sequence[str]) -> list[str]:
    args = list(run_args)
    for arg in args:
        if "\n" in arg or "\0" in arg:
            raise UsageError(f"dtbench run option {arg!r}: no newlines")
        reason = RESERVED_RUN_OPTIONS.get(_option_name(arg))
        if reason is not None:
            raise UsageError(f"{_option_name(arg)} cannot be passed to dtbench run in an sbatch "
                             f"script: {reason}")
    return args


# (suite, `dtbench run` options) -> the loaded suite and the specs those options plan
Planner = Callable[[str, list[str]], tuple[Any, list[Any]]]


def _suite_argument(suite: str) -> str:
    """Built-in names stay names; a file becomes an absolute path (the job may run elsewhere)."""
    from harness.run.suites import builtin_names

    if suite in builtin_names():
        return suite
    return str(Path(suite).expanduser().resolve())


def sbatch_script(suite: str, plan: Planner, *, nodes: int | None = None,
                  ntasks_per_node: int | None = None, cpus_per_task: int | None = None,
                  gpus_per_node: int | None = None, time: str = DEFAULT_TIME,
                  job_name: str | None = None, log: str = DEFAULT_LOG,
                  partition: str | None = None, account: str | None = None,
                  out_dir: str | None = None, json_file: str | None = None,
                  run_args: Sequence[str] = (), dtbench: str = "dtbench",
                  chdir: str | None = None, extra_sbatch: Sequence[str] = (),
                  quiet: bool = True) -> str:
    """The text of an sbatch script that runs `suite` with `--launcher slurm`.

    Args:
        suite: a built-in suite name or a suite TOML file (written as an absolute path).
        plan: the suite and the specs `dtbench run SUITE OPTIONS` plans (it checks the options).
        nodes: `#SBATCH --nodes`, and `--nnodes` for every run unless run_args sets it;
            default: the largest `nnodes` among the suite's runs (which keep their own).
        ntasks_per_node: `#SBATCH --ntasks-per-node`, and `-n` (ranks per node) for every run
            unless run_args sets it; default: the largest `nproc` among the suite's runs.
        cpus_per_task: `#SBATCH --cpus-per-task`, also passed as `--threads` so that each rank
            uses the CPUs it is given; default: the largest `threads` in the suite, else 1;
            with `gpus_per_node`, default: none, the node is asked for whole
            (`--exclusive`) and srun gives each GPU rank the node's CPUs divided among its
            ranks (one CPU each, Slurm's default, would starve NCCL's and autograd's threads).
        gpus_per_node: `#SBATCH --gpus-per-node` (omitted when None).
        time: `#SBATCH --time` in a Slurm time format ("30", "01:00:00", "1-12:00:00").
        job_name: `#SBATCH --job-name`; default `dtbench-<suite name>`.
        log: `#SBATCH --output`, the job's stdout/stderr file (`%x` job name, `%j` job id).
        partition, account: `#SBATCH --partition` / `--account` (omitted when None).
        out_dir: the results store (`dtbench run --out`), relative to the job's directory;
            default: the store `dtbench run` writes here ($DTBENCH_STORE, else .dtbench).
        json_file: also write the job's records to this file (`dtbench run --json`).
        run_args: further `dtbench run` options (`-w`, `--size`, `--steps`, `-n 1,2` ...);
            the options the script sets itself (`--launcher`, `--threads`, `--out`, ...) are
            refused. `-n 1,2,4` here runs each size in an allocation sized for the largest.
        dtbench: the command that starts dtbench on the compute nodes (a virtual
            environment's `bin/dtbench`, or `python -m harness`).
        chdir: `#SBATCH --chdir`, the job's working directory (default: where sbatch runs).
        extra_sbatch: further `#SBATCH` options, verbatim (`"--exclusive"`, `"--qos=high"`).
        quiet: pass `-q` (no progress display; the log is a file).

    Raises:
        UsageError: an unknown suite, a bad option, or a run that needs more nodes or
            ranks per node than the allocation asked for.
    """
    for what, value in (("nodes", nodes), ("ntasks_per_node", ntasks_per_node),
                        ("cpus_per_task", cpus_per_task), ("gpus_per_node", gpus_per_node)):
        _check_positive(what, value)
    if not TIME_RE.match(time):
        raise UsageError(f"sbatch time {time!r}: use minutes, HH:MM:SS or D-HH:MM:SS")
    args = _check_run_args(run_args)
    given = {_option_name(arg) for arg in args}
    if nodes is not None and "--nnodes" not in given:
        args += ["--nnodes", str(nodes)]
    if ntasks_per_node is not None and not given & {"-n", "--nproc"} \
            and not any(arg.startswith("-n") and arg[2:].isdigit() for arg in args):
        args += ["-n", str(ntasks_per_node)]
    loaded, specs = plan(suite, args)
    need_nodes = max(spec.nnodes for spec in specs)
    need_tasks = max(spec.nproc_per_node for spec in specs)
    nodes = nodes or need_nodes
    ntasks_per_node = ntasks_per_node or need_tasks
    for spec in specs:
        if spec.nnodes > nodes or spec.nproc_per_node > ntasks_per_node:
            raise UsageError(
                f"run {TRAINING.label(spec.as_dict())} needs {spec.nnodes} node(s) x "
                f"{spec.nproc_per_node} rank(s); the allocation has {nodes} x {ntasks_per_node}")
    gpu_ranks = max((spec.nproc_per_node for spec in specs if spec.backend == "cuda"), default=0)
    if gpus_per_node is not None and gpu_ranks > gpus_per_node:
        raise UsageError(f"{gpu_ranks} GPU rank(s) per node but --gpus-per-node {gpus_per_node}: "
                         "srun gives each GPU rank its own GPU; ask for one per rank")
    whole_node = cpus_per_task is None and gpus_per_node is not None
    if cpus_per_task is None and not whole_node:
        cpus_per_task = max([int(run.get("threads") or 0) for run in loaded.runs] + [1])
    job_name = _check_token("job name", job_name or f"dtbench-{loaded.name}")
    for what, value in (("log", log), ("partition", partition), ("account", account),
                        ("chdir", chdir)):
        if value is not None:
            _check_token(what, value)
    out_dir = default_store() if out_dir is None else out_dir
    for what, value in (("out_dir", out_dir), ("json_file", json_file)):
        if value is not None and (not value or "\n" in value or "\0" in value):
            raise UsageError(f"{what} {value!r}: must be a non-empty path on one line")
    if is_store_url(out_dir) and redact(out_dir) != out_dir:
        raise UsageError("--out: a store URL with a password would be written into the batch "
                         "script; leave the password out and give it to the job through "
                         "PGPASSWORD or ~/.pgpass")
    if not dtbench.strip() or "\n" in dtbench:
        raise UsageError(f"dtbench command {dtbench!r}: must be one non-empty line")
    extra = [_check_token("option", option) for option in extra_sbatch]

    lines = ["#!/bin/bash", f"#SBATCH --job-name={job_name}", f"#SBATCH --nodes={nodes}",
             f"#SBATCH --ntasks-per-node={ntasks_per_node}"]
    if whole_node:
        if "--exclusive" not in extra:
            lines.append("#SBATCH --exclusive")
    else:
        lines.append(f"#SBATCH --cpus-per-task={cpus_per_task}")
    if gpus_per_node is not None:
        lines.append(f"#SBATCH --gpus-per-node={gpus_per_node}")
    lines += [f"#SBATCH --time={time}", f"#SBATCH --output={log}"]
    if partition is not None:
        lines.append(f"#SBATCH --partition={partition}")
    if account is not None:
        lines.append(f"#SBATCH --account={account}")
    if chdir is not None:
        lines.append(f"#SBATCH --chdir={chdir}")
    lines += [f"#SBATCH {option}" for option in extra]
    command = [dtbench.strip(), "run", shlex.quote(_suite_argument(suite)),
               "--launcher", "slurm"]
    if not whole_node:
        command += ["--threads", str(cpus_per_task)]
    command += ["--out", shlex.quote(out_dir)]
    if json_file is not None:
        command += ["--json", shlex.quote(json_file)]
    if max(spec.nnodes for spec in specs) > 1:
        # Ranks on other nodes reach the rendezvous on the batch host, not on 127.0.0.1.
        command += ["--master-addr", '"$(hostname)"']
    command += [shlex.quote(arg) for arg in args]
    if quiet:
        command.append("-q")
    lines += [
        "",
        f"# Generated by dtbench {__version__}: suite {loaded.name}, {len(specs)} planned "
        "run(s). Submit with: sbatch FILE",
        "set -eu",
        'echo "dtbench: job ${SLURM_JOB_ID} on ${SLURM_JOB_NODELIST}, started $(date -Is)"',
        "exec " + " ".join(command),
        "",
    ]
    return "\n".join(lines)


def parse_sbatch_lines(script: str) -> dict[str, str]:
    """The `#SBATCH --name=value` options of a script (before its first command), by name.

    Flags without a value map to "". Slurm stops reading #SBATCH lines at the first command.
    """
    options: dict[str, str] = {}
    for line in script.splitlines()[1:]:
        stripped = line.strip()
        if not stripped or (stripped.startswith("#") and not stripped.startswith("#SBATCH")):
            continue
        if not stripped.startswith("#SBATCH"):
            break
        for token in shlex.split(stripped[len("#SBATCH"):]):
            name, _, value = token.partition("=")
            options[name] = value
    return options

