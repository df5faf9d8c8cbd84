"""`dtbench gate`: the performance gate of a change, as CI runs it.

`dtbench gate record` runs the benchmarks into the runner's history store (a push to the
target branch; the CI's cache keeps the store between jobs). `dtbench gate` runs them on this
change, then compares: against the history of the target branch where it holds this machine's
runs (the latest commits' runs, with the run-to-run spread of this machine's history), else
against the merge base's runs made now on this runner (a git worktree of the merge base, its
code first on PYTHONPATH). With `--interleave N` the base and this change run N times each,
alternating as fresh processes in one job, and are compared with each other instead.

The Markdown summary (a file, and on GitHub the job's step summary) says what changed, which
baseline was used and what a pass means: the smallest slowdown the gate would have caught on
this runner (harness/compare/detectable.py). Exit 0 pass, 1 a regression or a failed run, 2
the gate could not run.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.compare.baseline import Spread
from harness.compare.clock import CLOCK_NAMES
from harness.compare.command import Verdict, judge, load_all, store_baseline
from harness.compare.detectable import detectable, summary_lines
from harness.compare.render import markdown, render
from harness.core.errors import EXIT_NOTHING_COMPARED, EXIT_USAGE, UsageError
from harness.store.url import is_store_url

# What the shipped gate runs (.github/workflows/benchmark.yml, docs/ci/gitlab-ci.yml): each
# workload three times, each time in fresh processes, interleaved through the suite.
GATE_RUN = "quick --repeat 3"
# The checkout whose code this process runs (its root leaves PYTHONPATH for a base's run).
HEAD_ROOT = Path(__file__).resolve().parents[2]
BASES = ("merge-base", "target")


@dataclass(frozen=True)
class GateOptions:
    """What the gate runs and where it keeps things (commands/gate.py declares each option)."""

    run: str
    target_branch: str
    history: str
    summary: Path
    candidate: Path
    baseline: Path
    threshold: float
    base: str = "merge-base"
    interleave: int = 0
    repeat: int | None = None
    max_time: float | None = None
    baseline_here: bool = False
    clock: str = "wall"
    floor_decides: bool = False

    def run_args(self) -> list[str]:
        """`dtbench run`'s arguments: RUN, then --repeat and --max-time where given, and
        --speed-probe where the gate reads the probe's clock."""
        words = shlex.split(self.run)
        if self.repeat is not None:
            words += ["--repeat", str(self.repeat)]
        if self.max_time is not None:
            words += ["--max-time", f"{self.max_time:g}"]
        if self.clock == "probe" and "--speed-probe" not in words:
            words.append("--speed-probe")
        return words


@dataclass
class Decided:
    """A gate's verdict, the baseline it used (a sentence), and the history's spread."""

    verdict: Verdict
    baseline: str
    spread: dict[str, dict[str, Spread]] = field(default_factory=dict)
    clock: str = "wall"
    floor_decides: bool = False

    @property
    def exit_code(self) -> int:
        """0 pass, 1 a regression or failed run; nothing compared is a gate that could not
        run (2), never a pass."""
        code = self.verdict.exit_code
        return EXIT_USAGE if code == EXIT_NOTHING_COMPARED else code


def _log() -> Any:
    """Where a child's output goes: this process's stderr (stdout is the verdict's)."""
    try:
        sys.stderr.flush()
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return None


def dtbench_run(args: list[str], out: Path | str, code: Path | None = None) -> int:
    """`dtbench run ARGS -q --out OUT` in a fresh process, of this checkout's code or of the
    worktree `code` (started there, first on PYTHONPATH, this checkout off it)."""
    env, cwd = dict(os.environ), None
    if code is not None:
        kept = [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                if p and Path(p).resolve() != HEAD_ROOT]
        env["PYTHONPATH"] = os.pathsep.join([str(code), *kept])
        cwd = code
    store = str(out) if is_store_url(str(out)) else str(Path(out).resolve())
    command = [sys.executable, "-m", "harness", "run", *args, "-q", "--out", store]
    print(f"dtbench gate: dtbench {shlex.join(command[3:])}"
          + (f" (the code of {code})" if code else ""), file=sys.stderr, flush=True)
    return subprocess.run(command, cwd=cwd, env=env, stdout=_log()).returncode


def git(*args: str) -> str:
    """A git command's output in the working directory; UsageError (the gate cannot run)
    where it fails."""
    try:
        done = subprocess.run(["git", *args], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as exc:
        raise UsageError(f"git {' '.join(args)}: {exc}") from None
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise UsageError(f"git {' '.join(args)}: {why}")
    return done.stdout.strip()


def base_commit(options: GateOptions) -> tuple[str, str]:
    """The commit the baseline runs (the merge base of HEAD and the target branch, or the
    target branch's tip: --base) and its description."""
    target = options.target_branch
    for ref in (f"origin/{target}", target):
        try:
            git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
        except UsageError:
            continue
        if options.base == "target":
            return git("rev-parse", ref), f"the tip of {ref}"
        return git("merge-base", ref, "HEAD"), "the merge base"
    raise UsageError(f"no branch {target} (nor origin/{target}) to take the baseline from; "
                     "--target-branch names it (a CI checkout needs the history: fetch-depth 0)")


@contextmanager
def base_code(commit: str, here: bool) -> Iterator[Path | None]:
    """A git worktree of `commit` for the baseline's runs, removed afterwards; None with
    `here` (the baseline runs this checkout's code: for tests)."""
    if here:
        yield None
        return
    parent = Path(tempfile.mkdtemp(prefix="dtbench-base-"))
    folder = parent / "base"
    git("worktree", "add", "--detach", str(folder), commit)
    try:
        yield folder
    finally:
        try:
            git("worktree", "remove", "--force", str(folder))
        except UsageError:
            pass
        shutil.rmtree(parent, ignore_errors=True)


def _fresh(folder: Path, option: str) -> None:
    """A side's records go to a folder of their own: one that holds something is refused."""
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise UsageError(f"{folder}: exists and is not empty; remove it or name another "
                         f"folder with {option}")


def _ran(code: int, folder: Path, side: str) -> None:
    """A failed run leaves a record that says so (the comparison fails the gate on it); a
    run that left no folder could not run at all."""
    if code != 0 and not folder.is_dir():
        raise UsageError(f"the {side}'s benchmarks could not run (dtbench run exit {code})")


def against_history(options: GateOptions, cand_all: list[dict[str, Any]]) -> Decided | str:
    """The verdict against the target branch's history, or why there is none."""
    history = options.history
    if not is_store_url(history) and not Path(history).is_dir():
        return "no history store"
    try:
        base_all, spread = store_baseline(history, cand_all, branch=options.target_branch,
                                          clock=options.clock)
        verdict = judge(base_all, cand_all, options.threshold, spread=spread,
                        clock=options.clock, floor_decides=options.floor_decides)
    except UsageError as exc:
        return str(exc)
    if verdict.exit_code == EXIT_NOTHING_COMPARED:
        return verdict.nothing_compared or "nothing compared"
    return Decided(verdict, f"the history of {options.target_branch} on this runner "
                   f"({history}), the latest commits' runs", spread)


def pairwise(options: GateOptions, reason: str) -> Decided:
    """The merge base (or --base's commit) run now on this runner, then compared with the
    candidate's runs; interleaved with them where --interleave asks."""
    if options.baseline_here:
        commit, what = git("rev-parse", "HEAD"), "this checkout's code"
    else:
        commit, what = base_commit(options)
    _fresh(options.baseline, "--baseline")
    args = options.run_args()
    with base_code(commit, options.baseline_here) as code:
        for _ in range(max(1, options.interleave)):
            _ran(dtbench_run(args, options.baseline, code), options.baseline, "baseline")
            if options.interleave:
                _ran(dtbench_run(args, options.candidate), options.candidate, "candidate")
    verdict = judge(load_all(str(options.baseline)), load_all(str(options.candidate),
                                                              failed_ok=True),
                    options.threshold, clock=options.clock)
    if options.interleave:
        how = (f"run now on this runner interleaved with this change ({options.interleave} "
               "invocations each, alternating)")
    else:
        how = f"run now on this runner ({reason})"
    return Decided(verdict, f"{what} {commit[:12]} {how}")


def summary(decided: Decided) -> tuple[str, str]:
    """The gate's text (for the log) and its Markdown summary: the comparison, the baseline
    used, and what a pass means."""
    comparison = decided.verdict.comparison
    found = detectable(comparison, decided.spread)
    clock = [] if decided.clock == "wall" else [
        f"Clock: {decided.clock} (steps read as the {CLOCK_NAMES[decided.clock]})."]
    if decided.floor_decides and decided.spread:
        clock.append("Rule: a change beyond the history's floor fails the gate whatever the "
                     "runs' interval says (--floor-decides).")
    text = "\n".join([render(comparison), "", f"Baseline: {decided.baseline}.", *clock,
                      *summary_lines(found)])
    page = "\n".join([markdown(comparison, title="dtbench gate").rstrip("\n"), "",
                      f"Baseline: {decided.baseline}.", *clock, "",
                      *summary_lines(found, markdown=True)])
    return text + "\n", page + "\n"


def record(options: GateOptions) -> int:
    """`dtbench gate record`: the benchmarks into the history store; dtbench run's exit."""
    return dtbench_run(options.run_args(), options.history)


def gate(options: GateOptions) -> int:
    """`dtbench gate`: run this change, compare, write the summary; the exit code."""
    from harness.core.files import check_output_file

    check_output_file(str(options.summary), "--summary")  # before the runs, not after
    _fresh(options.candidate, "--candidate")
    if not options.interleave:
        _ran(dtbench_run(options.run_args(), options.candidate), options.candidate, "candidate")
        cand_all = load_all(str(options.candidate), failed_ok=True)
        if not any(record.get("status") == "success" for record in cand_all):
            decided: Decided | str = Decided(judge([], cand_all, options.threshold),
                                             "none (no run of this change succeeded)")
        else:
            decided = against_history(options, cand_all)
        if isinstance(decided, str):
            print(f"dtbench gate: no usable history ({decided}): the baseline runs now",
                  file=sys.stderr)
            decided = pairwise(options, decided)
    else:
        decided = pairwise(options, "interleaved")
    decided.clock, decided.floor_decides = options.clock, options.floor_decides
    text, page = summary(decided)
    sys.stdout.write(text)
    options.summary.write_text(page, encoding="utf-8")
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if step_summary:
        with open(step_summary, "a", encoding="utf-8") as stream:
            stream.write(page)
    if decided.verdict.nothing_compared:
        print(f"dtbench gate: {decided.verdict.nothing_compared}", file=sys.stderr)
    return decided.exit_code
