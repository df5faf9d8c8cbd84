"""The baseline of a CI gate taken from a store: of the records of the candidate's own machine,
those of one commit (`--baseline-commit`, or the merge base of a ref with `--baseline-merge-base`)
or, per experiment, the latest good result on a branch (`--baseline-branch`), as asv and
conbench pick the result a pull request is judged against.

A store holds many machines and commits; pooling them makes a gate compare hardware or an
old commit. Each selection keeps only successful records of clean checkouts of the candidate's
machine, and says which commits it took.
"""
from __future__ import annotations

import math
import statistics
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.compare.matching import fields_key
from harness.core.errors import UsageError
from harness.facts.metrics import VALUE, compare_role
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


@dataclass(frozen=True)
class Spread:
    """How far apart two commits of the same code fall on a machine, for one metric of one
    experiment: `sigma`, the standard deviation of the log ratio of two commits' medians
    (1.4826 x the median absolute difference of consecutive commits' log medians), from
    `commits` commits of `runs` runs each (the median count); and for a metric with one value
    a run, the range its single runs reached (percent)."""

    sigma: float
    commits: int
    runs: int
    single_range_pct: float | None = None

    @property
    def floor_pct(self) -> float:
        """The 95% band of the ratio of two commits' medians, percent: no change within it
        is called one (at least the single runs' range, for a one-value-a-run metric)."""
        floor = (math.exp(1.96 * self.sigma) - 1.0) * 100
        return max(floor, self.single_range_pct or 0.0)


@dataclass
class Selection:
    """The records chosen as the baseline, the line that says where they came from, and the
    run-to-run spread of each experiment in the machine's history (experiment key -> metric
    -> Spread); `noise` reads the same as floors (percent)."""

    records: list[dict[str, Any]] = field(default_factory=list)
    description: str = ""
    spread: dict[str, dict[str, Spread]] = field(default_factory=dict)

    @property
    def noise(self) -> dict[str, dict[str, float]]:
        return floors_of(self.spread)


def floors_of(spread: dict[str, dict[str, Spread]]) -> dict[str, dict[str, float]]:
    return {key: {name: found.floor_pct for name, found in metrics.items()}
            for key, metrics in spread.items()}


def history_noise(records: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per experiment and metric, how far apart two commits of the same code fall on this
    machine (percent, 95%), as the gate compares them (history_spread's floors).
    A gate then calls no change that this machine's reruns reach on their own, whatever one
    invocation's intervals say (they leave out what varies between invocations: a run's
    repeats drift together, and on a 2-core VM two commits' medians of unchanged code fell
    0.82-1.22 apart while each run's interval was within 2%)."""
    return floors_of(history_spread(records))


def history_spread(records: list[dict[str, Any]]) -> dict[str, dict[str, Spread]]:
    """Per experiment and metric, the Spread of its latest HISTORY_RUNS commits in time order:
    each commit's median over its runs (its --repeat); the differences of consecutive
    logarithms (a real step between two commits is one difference among them, so their
    median ignores it), whose spread 1.4826 x median |d| is that of the log ratio of two
    commits. Experiments with fewer than MIN_HISTORY commits have none; records without a
    commit count one each. A metric with one value a run (peak memory) keeps the range its
    single runs reached: its runs do not drift together, and a value that lands in one of two
    modes run by run (alexnet's peak memory: 605 or 645 MB) moves a commit's median of three
    by the whole gap while most commits' medians agree."""
    experiments: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for record in records:
        if record.get("spec_key"):
            commit = code_of(record).get("commit") or f"run {record.get('run_id')}"
            experiments.setdefault(experiment_key(record), {}).setdefault(
                str(commit), []).append(record)
    found: dict[str, dict[str, Spread]] = {}
    for key, commits in experiments.items():
        ordered = sorted(commits.values(),
                         key=lambda runs: min(str(r.get("created_at", "")) for r in runs))
        values: dict[str, list[float]] = {}
        singles: dict[str, list[float]] = {}
        counts: dict[str, list[int]] = {}
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
                counts.setdefault(name, []).append(len(found_values))
        for name, logs in values.items():
            if len(logs) < MIN_HISTORY:
                continue
            single = (max(singles[name]) / min(singles[name]) - 1.0) * 100 \
                if compare_role(name) == VALUE else None
            found.setdefault(key, {})[name] = Spread(ratio_sigma(logs), len(logs),
                                                     int(statistics.median(counts[name])),
                                                     single)
    return found


def ratio_sigma(logs: list[float]) -> float:
    """The standard deviation of the log ratio of two commits' medians, from consecutive
    commits' log medians in time order: 1.4826 x the median absolute difference of
    consecutive ones (a step of the code between two commits is one difference, which the
    median ignores)."""
    return 1.4826 * statistics.median(abs(b - a) for a, b in
                                      zip(logs[:-1], logs[1:], strict=True))


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
                         f"({len(chosen)} records of {source})", history_spread(mine))
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
                     history_spread(on_branch))


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
