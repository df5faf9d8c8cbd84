"""The baseline of a CI gate taken from a store: of the records of the candidate's own machine,
those of one commit (`--baseline-commit`, or the merge base of a ref with `--baseline-merge-base`)
or, per experiment, the latest good result on a branch (`--baseline-branch`), as asv and
conbench pick the result a pull request is judged against.

A store holds many machines and commits; pooling them makes a gate compare hardware or an
old commit. Each selection keeps only successful records of clean checkouts of the candidate's
machine, and says which commits it took.
"""
from __future__ import annotations

import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.compare.matching import fields_key
from harness.core.errors import UsageError
from harness.core.metrics import VALUE, compare_role
from harness.records.experiment import experiment_key
from harness.records.summary import label_of as machine_of


def code_of(record: Mapping[str, Any]) -> dict[str, Any]:
    code = record.get("code")
    return code if isinstance(code, dict) else {}


def _commit_matches(record: Mapping[str, Any], commit: str) -> bool:
    found = code_of(record).get("commit")
    return isinstance(found, str) and found.lower().startswith(commit.lower())


def merge_base(ref: str, directory: Path | None = None) -> str:
    """`git merge-base REF HEAD` in the working directory, or UsageError saying why not."""
    try:
        done = subprocess.run(["git", "-C", str(directory or Path.cwd()), "merge-base", ref,
                               "HEAD"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        raise UsageError(f"--baseline-merge-base {ref}: git failed ({exc})") from None
    if done.returncode != 0 or not done.stdout.strip():
        why = (done.stderr.strip().splitlines() or ["no common ancestor"])[-1]
        raise UsageError(f"--baseline-merge-base {ref}: {why}")
    return done.stdout.strip()


# The run-to-run noise of an experiment is estimated from its latest commits on the machine
# (at least MIN_HISTORY of them): how far apart two commits' medians of unchanged code fall.
HISTORY_RUNS = 10
MIN_HISTORY = 5


@dataclass
class Selection:
    """The records chosen as the baseline, the line that says where they came from, and the
    run-to-run noise of each experiment in the machine's history (experiment key -> metric
    -> percent)."""

    records: list[dict[str, Any]] = field(default_factory=list)
    description: str = ""
    noise: dict[str, dict[str, float]] = field(default_factory=dict)


def history_noise(records: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per experiment and metric, how far apart two commits of the same code fall on this
    machine (percent, 95%), as the gate compares them: each commit's median over its runs
    (its --repeat), for the latest HISTORY_RUNS commits in time order; the differences of
    consecutive logarithms (a real step between two commits is one difference among them, so
    their median ignores it), whose spread 1.4826 x median |d| is that of the log ratio of two
    commits; the ratio falls within exp(1.96 x 1.4826 x median |d|). Experiments with fewer
    than MIN_HISTORY commits have none; records without a commit count one each.
    A gate then calls no change that this machine's reruns reach on their own, whatever one
    invocation's intervals say (they leave out what varies between invocations: a run's
    repeats drift together, and on a 2-core VM two commits' medians of unchanged code fell
    0.82-1.22 apart while each run's interval was within 2%)."""
    import math
    import statistics

    experiments: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for record in records:
        if record.get("spec_key"):
            commit = code_of(record).get("commit") or f"run {record.get('run_id')}"
            experiments.setdefault(experiment_key(record), {}).setdefault(
                str(commit), []).append(record)
    found: dict[str, dict[str, float]] = {}
    for key, commits in experiments.items():
        ordered = sorted(commits.values(),
                         key=lambda runs: min(str(r.get("created_at", "")) for r in runs))
        values: dict[str, list[float]] = {}
        singles: dict[str, list[float]] = {}
        for runs in ordered[-HISTORY_RUNS:]:
            per_metric: dict[str, list[float]] = {}
            for record in runs:
                for entry in record.get("metrics") or []:
                    value = entry.get("value") if isinstance(entry, dict) else None
                    if isinstance(value, int | float) and not isinstance(value, bool) \
                            and value > 0 and math.isfinite(value):
                        per_metric.setdefault(str(entry.get("name")), []).append(value)
            for name, found_values in per_metric.items():
                values.setdefault(name, []).append(math.log(statistics.median(found_values)))
                singles.setdefault(name, []).extend(found_values)
        for name, logs in values.items():
            if len(logs) < MIN_HISTORY:
                continue
            typical = statistics.median(abs(b - a) for a, b in
                                        zip(logs[:-1], logs[1:], strict=True))
            floor = (math.exp(1.96 * 1.4826 * typical) - 1.0) * 100
            if compare_role(name) == VALUE:
                # one value a run (peak memory): its runs do not drift together, and a value
                # that lands in one of two modes run by run (alexnet's peak memory: 605 or 645
                # MB) moves a commit's median of three by the whole gap while most commits'
                # medians agree; no change within what single runs of this code reached
                floor = max(floor, (max(singles[name]) / min(singles[name]) - 1.0) * 100)
            found.setdefault(key, {})[name] = floor
    return found


def candidate_machine(candidate: list[dict[str, Any]]) -> str:
    machines = sorted({machine_of(r) for r in candidate})
    if len(machines) != 1:
        raise UsageError("the candidate's records come from " + (
            "no machine" if not machines else f"{len(machines)} machines "
            f"({'; '.join(machines)})") + ": a baseline chosen by machine needs one")
    return machines[0]


def _experiment(record: Mapping[str, Any]) -> Any:
    """The experiment a record measured (harness/records/experiment.py), else its spec's
    identity."""
    return experiment_key(record) if record.get("spec_key") else fields_key(dict(record))


def _commits(records: list[dict[str, Any]]) -> str:
    seen = dict.fromkeys(str(code_of(r).get("commit") or "?")[:12] for r in records)
    return ", ".join(seen)


def select_baseline(stored: list[dict[str, Any]], candidate: list[dict[str, Any]],
                    source: str, commit: str | None = None, branch: str | None = None
                    ) -> Selection:
    """The baseline records of `stored` for `candidate`: its machine's successful records at
    `commit` (a prefix), or per experiment those of the newest commit on `branch` that has
    one. UsageError where none exists, naming what the store does hold."""
    machine = candidate_machine(candidate)
    mine = [r for r in stored if machine_of(r) == machine and r.get("status") == "success"
            and code_of(r).get("dirty") is not True]
    if not mine:
        machines = sorted({machine_of(r) for r in stored})
        raise UsageError(f"{source}: no successful record of the candidate's machine "
                         f"({machine}); it holds {', '.join(machines) or 'none'}")
    if commit is not None:
        chosen = [r for r in mine if _commit_matches(r, commit)]
        if not chosen:
            raise UsageError(f"{source}: no successful record of {machine} at commit "
                             f"{commit[:12]} (it holds commits {_commits(mine)})")
        return Selection(chosen, f"baseline: {machine} at commit {_commits(chosen)} "
                         f"({len(chosen)} records of {source})", history_noise(mine))
    on_branch = [r for r in mine if code_of(r).get("branch") == branch]
    if not on_branch:
        branches = sorted({str(code_of(r).get("branch")) for r in mine})
        raise UsageError(f"{source}: no successful record of {machine} on branch {branch} "
                         f"(branches: {', '.join(branches)})")
    latest: dict[Any, str] = {}
    for record in sorted(on_branch, key=lambda r: str(r.get("created_at", "")), reverse=True):
        latest.setdefault(_experiment(record), str(code_of(record).get("commit")))
    chosen = [r for r in on_branch if latest[_experiment(r)] == str(code_of(r).get("commit"))]
    return Selection(chosen, f"baseline: {machine}, latest on {branch}: commit "
                     f"{_commits(chosen)} ({len(chosen)} records of {source})",
                     history_noise(on_branch))


def pooled(records: list[dict[str, Any]], side: str) -> str | None:
    """What a side given whole (a store, a machine's folder) holds beyond one version of each
    experiment on one machine, and what compare does with it: the latest version of each
    machine's experiment, each machine paired with the same machine on the other side."""
    from harness.records.experiment import latest, version_of

    machines = sorted({machine_of(r) for r in records})
    kept, older = latest(records)
    parts = []
    if len(machines) > 1:
        parts.append(f"records of {len(machines)} machines ({'; '.join(machines[:4])}"
                     f"{'; ...' if len(machines) > 4 else ''}), each compared with the same "
                     "machine on the other side")
    if older:
        left = sorted({version_of(r) for r in records} - {version_of(r) for r in kept})
        parts.append(f"{older} older record(s) of the same experiments ({len(left)} earlier "
                     f"commit(s) or day(s): {', '.join(left[:4])}{', ...' if len(left) > 4 else ''}"
                     "), left out: each experiment's latest is compared")
    if not parts:
        return None
    return (f"{side} holds {', and '.join(parts)}; --baseline-branch, --baseline-commit or "
            "--baseline-merge-base take one commit of the candidate's machine from a store")
