"""`dtbench compare BASELINE CANDIDATE`: match records by spec, test every sampled metric, and
exit 1 when one got worse by more than the threshold with statistical significance.

A change counts as a regression only when both the bootstrap CI of the ratio of medians lies
wholly on the worse side of 1 and the Mann–Whitney test agrees (p < 0.05): a noisy pair of runs
on a shared machine should not fail a CI pipeline, a real slowdown should. A run that failed
in the candidate fails the gate. Records from different hardware are refused (exit 2) unless
--allow-different-hardware makes it a hardware comparison; a side whose records carry no CPU
fingerprint is named as unknown hardware. When nothing could be compared, compare exits
EXIT_NOTHING_COMPARED and says why.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.compare.baseline import Spread
from harness.compare.clock import on_clock
from harness.compare.matching import spec_differences
from harness.compare.render import as_json, markdown, render, wrapped
from harness.compare.rows import Comparison, compare_records
from harness.core.errors import (
    EXIT_FAILED,
    EXIT_NOTHING_COMPARED,
    EXIT_OK,
    UsageError,
)
from harness.core.outputs import clean_text, terminal_text
from harness.machine.load import is_busy
from harness.store.sources import load_inputs
from harness.store.url import is_store_url, redact


def warn(message: str) -> None:
    """A warning on stderr, one paragraph wrapped to lines a terminal shows whole."""
    print("\n".join(wrapped(f"dtbench: warning: {clean_text(message, 2000)}")), file=sys.stderr)


def failed_runs(records: list[dict[str, Any]]) -> list[str]:
    """'workload label: error' of each failed run (skipped ones are not failures); a record's
    text, made one printable line and cut."""
    return [f"{clean_text((record.get('spec') or {}).get('workload', '?'), 100)} "
            f"{clean_text(record.get('run_id'), 200)}: "
            f"{clean_text(record.get('error') or 'failed', 200)}"
            for record in records if record.get("status") == "failed"]


def unknown_hardware(records: list[dict[str, Any]]) -> bool:
    """Whether none of a side's records says which CPU it ran on."""
    return not any(isinstance(machine := record.get("machine"), dict)
                   and (machine.get("cpu_model") or machine.get("cpu_family") is not None)
                   for record in records)


def shown(path: str) -> str:
    """A path as printed: a store URL without its password."""
    return redact(path) if is_store_url(path) else path


def load_all(target: str, failed_ok: bool = False) -> list[dict[str, Any]]:
    """A side's records; UsageError where none is readable, or none succeeded (unless
    `failed_ok` and some failed: a candidate whose runs all failed fails the gate)."""
    loaded, path = load_inputs([target]), shown(target)
    if not loaded.records:
        why = f" ({loaded.warnings[0]}" + (f", and {len(loaded.warnings) - 1} more" if
                                           len(loaded.warnings) > 1 else "") + ")" \
            if loaded.warnings else ""
        raise UsageError(f"{path}: no readable dtbench records{why}")
    for message in loaded.warnings:
        warn(message)
    if not any(record.get("status") == "success" for record in loaded.records) and not (
            failed_ok and failed_runs(loaded.records)):
        raise UsageError(f"{path}: no successful records to compare "
                         f"({len(loaded.records)} skipped or failed)")
    return loaded.records


def parse_match_on(text: str | None) -> tuple[str, ...] | None:
    """--match-on workload,size,precision -> the spec fields that alone decide a match."""
    if text is None:
        return None
    fields = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    if not fields:
        raise UsageError("--match-on: name the spec fields to match on, e.g. "
                         "workload,size,precision")
    return fields


def nothing_compared(comparison: Comparison, baseline: list[dict[str, Any]],
                     candidate: list[dict[str, Any]], match_on: tuple[str, ...] | None) -> str:
    """Why a comparison compared nothing, in one line."""
    if comparison.pairs:
        return ("every matched spec lacks samples on a side (no per-step data and no "
                "mean/stddev/rounds to test): nothing compared")
    differences = spec_differences(baseline, candidate)
    if match_on:
        differences = [d for d in differences if d.split(":")[0] in match_on]
    if differences:
        return ("no spec in common: nothing compared; the sides differ in "
                + "; ".join(differences) + " (--match-on FIELDS compares across an "
                "intended difference)")
    return ("no spec in common: nothing compared; each side's fields overlap but no record "
            "has a partner with the same spec_key (threads, compile, data or another field "
            "differs per record; --match-on FIELDS compares across it)")


def _machine_ids(records: list[dict[str, Any]]) -> set[str]:
    return {str(machine["machine_id"]) for record in records
            if isinstance(machine := record.get("machine"), dict) and machine.get("machine_id")}


def other_machines(comparison: Comparison) -> str | None:
    """A note when the compared records ran on different machines of the same hardware."""
    before = _machine_ids([r for base, _ in comparison.pairs for r in base.records])
    after = _machine_ids([r for _, cand in comparison.pairs for r in cand.records])
    if comparison.hardware or not before or not after or before == after:
        return None
    return (f"baseline and candidate ran on different machines (machine_id "
            f"{', '.join(sorted(before))} vs {', '.join(sorted(after))}) with the same "
            "hardware fields; neighbours and placement may differ")


def trajectory_command(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    """--trajectory: the same model, step by step, or the step where the runs part."""
    from harness.compare.trajectory import compare_trajectories, only_trajectory

    if args.tolerance is not None and not args.tolerance > 0:
        raise UsageError(f"--tolerance {args.tolerance}: expected a positive number")
    a = only_trajectory(load_all(args.baseline), shown(args.baseline))
    b = only_trajectory(load_all(args.candidate), shown(args.candidate))
    found = compare_trajectories(a, b, args.tolerance)
    print(terminal_text(found.render(shown(args.baseline), shown(args.candidate))))
    return (EXIT_OK if found.same else EXIT_FAILED), found.as_dict()


def chosen_baseline(args: argparse.Namespace, cand_all: list[dict[str, Any]]
                    ) -> tuple[list[dict[str, Any]], dict[str, dict[str, Spread]]]:
    """The baseline side: every record given, or those --baseline-branch, --baseline-commit
    or --baseline-merge-base choose from the store for the candidate's machine (chosen from
    the store's index: only the chosen records are read); and, for a store's baseline, the
    run-to-run spread of each experiment in the machine's history."""
    from harness.compare.baseline import merge_base, pooled

    branch = getattr(args, "baseline_branch", None)
    commit = getattr(args, "baseline_commit", None)
    ref = getattr(args, "baseline_merge_base", None)
    if ref:
        commit = merge_base(ref)
    elif commit is not None and (len(commit) < 7 or
                                 any(c not in "0123456789abcdefABCDEF" for c in commit)):
        raise UsageError(f"--baseline-commit {commit}: expected at least 7 hex digits")
    if branch is None and commit is None:
        base_all = load_all(args.baseline)
        note = pooled([r for r in base_all if r.get("status") == "success"], "the baseline")
        if note:
            warn(note)
        return base_all, {}
    return store_baseline(args.baseline, cand_all, commit, branch,
                          getattr(args, "clock", "wall"))


def read_on(records: list[dict[str, Any]], clock: str, side: str) -> list[dict[str, Any]]:
    """A side's records on `clock`, warning of those that cannot be read on it."""
    kept, note = on_clock(records, clock, side)
    if note:
        warn(note)
    return kept


def store_baseline(source: str, cand_all: list[dict[str, Any]], commit: str | None = None,
                   branch: str | None = None, clock: str = "wall"
                   ) -> tuple[list[dict[str, Any]], dict[str, dict[str, Spread]]]:
    """The records of a store that `commit` or, per experiment, the latest on `branch` chose
    for the candidate's machine (chosen from the store's index: only those are read), and
    the spread of each experiment in the machine's history; UsageError where it holds none.
    On another clock than the wall's the history's records are read whole (the index keeps
    the wall clock's figures), each on that clock."""
    from harness.compare.baseline import select_baseline
    from harness.store.sources import catalog_inputs

    catalog = catalog_inputs([source])
    for message in catalog.warnings:
        warn(message)
    summaries = catalog.summaries() if clock == "wall" else \
        read_on(catalog.load(catalog.rows), clock, "history")
    selection = select_baseline(summaries, cand_all, shown(source), commit, branch)
    chosen = {record["run_id"] for record in selection.records}
    print(f"dtbench: {clean_text(selection.description, 2000)}", file=sys.stderr)
    if selection.spread:
        print(f"dtbench: run-to-run noise from the machine's history: "
              f"{len(selection.spread)} experiment(s) with at least 5 runs; no change within "
              "it is called a regression", file=sys.stderr)
    if clock != "wall":
        return selection.records, selection.spread  # read whole already
    return catalog.load([row for row in catalog.rows if row["run_id"] in chosen]), \
        selection.spread


@dataclass
class Verdict:
    """A comparison as the gate decides it: the rows, the exit code, and (exit 3) why nothing
    was compared."""

    comparison: Comparison
    exit_code: int
    nothing_compared: str | None = None


def judge(base_all: list[dict[str, Any]], cand_all: list[dict[str, Any]], threshold: float,
          *, match_on: tuple[str, ...] | None = None,
          spread: dict[str, dict[str, Spread]] | None = None,
          allow_hardware: bool = False, clock: str = "wall", floor_decides: bool = False
          ) -> Verdict:
    """Compare two sides' records and decide: exit 1 on a gated regression or a failed
    candidate run, 3 when nothing was compared, else 0. Different hardware is UsageError unless
    `allow_hardware`; the warnings (hardware, busy machines, other machines) go to stderr.
    `clock` reads both sides' steps on that clock (harness/compare/clock.py);
    `floor_decides`: at run level a change beyond the history's floor (`spread`) is called
    without the runs' interval (rows.compare_groups)."""
    from harness.compare.baseline import floors_of

    base_all, cand_all = read_on(base_all, clock, "baseline"), read_on(cand_all, clock,
                                                                         "candidate")

    failures = failed_runs(cand_all)
    if not any(record.get("status") == "success" for record in cand_all):
        for failure in failures:
            print(f"dtbench: candidate run failed: {failure}", file=sys.stderr)
        return Verdict(Comparison(threshold, [], [], [], [], failed_runs=failures), EXIT_FAILED)
    baseline = [record for record in base_all if record.get("status") == "success"]
    candidate = [record for record in cand_all if record.get("status") == "success"]
    comparison = compare_records(baseline, candidate, threshold, match_on,
                                 floors_of(spread or {}), floor_decides)
    if comparison.hardware and not allow_hardware:
        label, found = next(iter(comparison.hardware.items()))
        raise UsageError(f"different hardware ({label}: {'; '.join(found)}): compare refuses "
                         "to gate across machines; --allow-different-hardware makes it a "
                         "hardware comparison")
    for note in comparison.hardware_notes():
        warn(f"different hardware: this is a hardware comparison ({note}); a difference may "
             "come from the hardware")
    for side, records in (("baseline", baseline), ("candidate", candidate)):
        if unknown_hardware(records):
            warn(f"{side}: unknown hardware (its records carry no CPU fingerprint); the "
                 "comparison cannot tell a code change from a machine change")
    comparison.failed_runs = failures
    for side, records in (("baseline", baseline), ("candidate", candidate)):
        busy = [str(r.get("run_id")) for r in records if is_busy(r)]
        if busy:
            warn(f"{side}: {len(busy)} run(s) measured on a busy machine ({', '.join(busy[:3])}"
                 f"{', ...' if len(busy) > 3 else ''}); their figures may be slowed by other "
                 "processes")
    note = other_machines(comparison)
    if note:
        warn(note)
    for failure in comparison.failed_runs:
        print(f"dtbench: candidate run failed: {failure}", file=sys.stderr)
    if comparison.failed:
        return Verdict(comparison, EXIT_FAILED)
    if not comparison.compared:
        return Verdict(comparison, EXIT_NOTHING_COMPARED,
                       nothing_compared(comparison, baseline, candidate, match_on))
    return Verdict(comparison, EXIT_OK)


def two_latest_versions(store: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """`dtbench compare` with no paths: of the store `run` writes, the machine of its newest
    record, the records of the version (commit, else day) before the newest as the baseline
    and those of the newest as the candidate; UsageError where it holds fewer than two."""
    from harness.records.experiment import machine_of, version_of

    records = load_all(store, failed_ok=True)
    newest = max(records, key=lambda r: str(r.get("created_at") or ""))
    machine = machine_of(newest)
    mine = [r for r in records if machine_of(r) == machine]
    order: dict[str, str] = {}
    for record in mine:
        version = version_of(record)
        order[version] = max(order.get(version, ""), str(record.get("created_at") or ""))
    versions = sorted(order, key=order.__getitem__)
    if len(versions) < 2:
        raise UsageError(f"{store}: {machine}'s records hold one version of the code "
                         f"({versions[0]}); run again after a change, or name BASELINE and "
                         "CANDIDATE")
    print(f"dtbench: {machine} in {store}: baseline {versions[-2]}, candidate {versions[-1]}",
          file=sys.stderr)
    return ([r for r in mine if version_of(r) == versions[-2]],
            [r for r in mine if version_of(r) == versions[-1]])


def command(args: argparse.Namespace) -> tuple[int, dict[str, Any]]:
    """`dtbench compare`: print the comparison (text or Markdown) and return the exit code with
    the JSON document (commands/compare.py writes it where --json says)."""
    from harness.store.targets import default_store

    given = [path for path in (args.baseline, args.candidate) if path is not None]
    if len(given) == 1:
        raise UsageError("name both BASELINE and CANDIDATE, or neither (the two latest "
                         "versions of the code in the store `run` writes)")
    if not given and (getattr(args, "trajectory", False) or any(
            getattr(args, name, None) for name in
            ("baseline_branch", "baseline_commit", "baseline_merge_base"))):
        raise UsageError("--trajectory and --baseline-* need BASELINE and CANDIDATE")
    if getattr(args, "trajectory", False):
        return trajectory_command(args)
    match_on = parse_match_on(getattr(args, "match_on", None))
    spread: dict[str, dict[str, Spread]] = {}
    if not given:
        store = default_store()
        if not is_store_url(store) and not Path(store).exists():
            raise UsageError(f"{store}: no store yet (dtbench run writes its records there, "
                             "or name BASELINE and CANDIDATE)")
        base_all, cand_all = two_latest_versions(store)
    else:
        if not is_store_url(args.baseline) and not Path(args.baseline).exists():
            raise UsageError(f"{args.baseline}: no such file or directory")  # before candidate
        cand_all = load_all(args.candidate, failed_ok=True)
        base_all, spread = (chosen_baseline(args, cand_all)
                            if any(r.get("status") == "success" for r in cand_all)
                            else ([], {}))
    verdict = judge(base_all, cand_all, float(args.threshold), match_on=match_on, spread=spread,
                    allow_hardware=bool(getattr(args, "allow_different_hardware", False)),
                    clock=getattr(args, "clock", "wall"),
                    floor_decides=bool(getattr(args, "floor_decides", False)))
    verbose = bool(getattr(args, "verbose", False))
    if getattr(args, "format", None) == "md":  # Markdown escapes every record text itself
        print(markdown(verdict.comparison, verbose), end="")
    else:
        print(render(verdict.comparison, verbose))
    if verdict.nothing_compared:
        print(f"dtbench: {verdict.nothing_compared}", file=sys.stderr)
    return verdict.exit_code, as_json(verdict.comparison)
