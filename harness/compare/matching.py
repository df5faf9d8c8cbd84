"""Which records of the two sides are the same experiment: grouped by spec (the experiment
identity of harness/records/experiment.py where every record has a spec_key, else the spec's
identity by the declared run fields, or only the fields of --match-on). Within a side, records
of one machine's experiment are pooled only from its latest version of the code (a side that
holds several commits compares the newest), and the records of several machines are paired
machine by machine, never pooled."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from harness.core.outputs import clean_text
from harness.records.experiment import APART_FIELDS, experiment_key, latest, machine_of
from harness.spec.kinds import kind_of, plain, spec_value
from harness.spec.specs import NOT_IN_KEY

# Spec fields that never make two runs different experiments.
NOT_IDENTITY = frozenset(NOT_IN_KEY) - frozenset(APART_FIELDS)


def fields_key(record: dict[str, Any], match_on: tuple[str, ...] | None = None
               ) -> tuple[str, ...]:
    """The spec's identity as its kind states it (harness/spec/kinds.py: a training record's
    by the rule of its spec_key; a collective's common fields, its op and largest message; a
    kernel's common fields, its kernel, pass, algorithm and threads), or only `match_on`."""
    spec = record["spec"]
    if match_on:
        return tuple(plain(spec_value(spec, name)) for name in match_on)
    kind = kind_of(spec)
    return (kind.name, *(f"{name}={plain(value)}"
                         for name, value in sorted(kind.identity(spec).items())))


def _spec_key(record: dict[str, Any]) -> str | None:
    return experiment_key(record) if record.get("spec_key") not in (None, "") else None


def spec_label(record: dict[str, Any], spec_key: str | None = None) -> str:
    """The spec's short label (its kind's: size/backend/precision/comm/ws/bs for a run), the
    way a reader tells two runs of a workload apart; its key where two specs read alike."""
    spec = record["spec"]
    label = kind_of(spec).short_label(spec)
    if not spec_key:
        apart = [f"{name}={plain(spec[name])}" for name in APART_FIELDS
                 if spec.get(name) is not None]
        return " ".join([label, *apart])
    key, _, apart = spec_key.partition(" ")
    return f"{label} key {key[:8]}" + (f" {apart}" if apart else "")


@dataclass
class SpecGroup:
    """Records of one spec on one side; repeats pool their samples."""

    workload: str
    label: str
    records: list[dict[str, Any]]


def _group(records: Iterable[dict[str, Any]], match_on: tuple[str, ...] | None
           ) -> dict[tuple[str, ...], dict[str | None, list[dict[str, Any]]]]:
    groups: dict[tuple[str, ...], dict[str | None, list[dict[str, Any]]]] = {}
    for record in records:
        spec_key = None if match_on else _spec_key(record)
        groups.setdefault(fields_key(record, match_on), {}).setdefault(spec_key, []).append(
            record)
    return groups


def _one_group(records: list[dict[str, Any]], spec_key: str | None = None,
               machine: str | None = None) -> SpecGroup:
    """The group of records of one spec, named by the first's workload and spec label (a
    record's text: one printable line, cut, as every output shows it)."""
    label = spec_label(records[0], spec_key) + (f" on {machine}" if machine else "")
    return SpecGroup(clean_text(records[0]["spec"].get("workload"), 100),
                     clean_text(label, 300), records)


def _by_machine(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        found.setdefault(machine_of(record), []).append(record)
    return found


def _pair(base: list[dict[str, Any]], cand: list[dict[str, Any]], shown: str | None
          ) -> tuple[list[tuple[SpecGroup, SpecGroup]], list[SpecGroup], list[SpecGroup]]:
    """One experiment's records of the two sides: one machine a side is one pair (the same
    machine, or a hardware comparison); with several, each machine is paired with itself and
    the rest have no partner."""
    before, after = _by_machine(base), _by_machine(cand)
    if len(before) == 1 and len(after) == 1:
        return [(_one_group(base, shown), _one_group(cand, shown))], [], []
    pairs = [(_one_group(before[m], shown, m), _one_group(after[m], shown, m))
             for m in before if m in after]
    return (pairs, [_one_group(found, shown, m) for m, found in before.items() if m not in after],
            [_one_group(found, shown, m) for m, found in after.items() if m not in before])


def match_specs(baseline: list[dict[str, Any]], candidate: list[dict[str, Any]],
                match_on: tuple[str, ...] | None = None,
                ) -> tuple[list[tuple[SpecGroup, SpecGroup]], list[SpecGroup], list[SpecGroup]]:
    """Pairs of groups of the same spec, then the groups found only in baseline or candidate.

    spec_key decides when every record of a spec has one (it covers fields such as threads and
    compile that the fallback key lacks); otherwise the fields key alone decides. With
    `match_on`, only those spec fields decide (a comparison across an intended difference)."""
    base_groups = _group(latest(baseline)[0], match_on)
    cand_groups = _group(latest(candidate)[0], match_on)
    # a side of several machines names each group's machine
    several_base = len(_by_machine(baseline)) > 1
    several_cand = len(_by_machine(candidate)) > 1
    pairs: list[tuple[SpecGroup, SpecGroup]] = []
    only_base: list[SpecGroup] = []
    only_cand: list[SpecGroup] = []

    def add(base: list[dict[str, Any]], cand: list[dict[str, Any]], shown: str | None) -> None:
        found = _pair(base, cand, shown)
        pairs.extend(found[0])
        only_base.extend(found[1])
        only_cand.extend(found[2])

    for key in list(base_groups) + [k for k in cand_groups if k not in base_groups]:
        base, cand = base_groups.get(key, {}), cand_groups.get(key, {})
        if not base or not cand:
            for side, found, several in ((base, only_base, several_base),
                                         (cand, only_cand, several_cand)):
                for spec_key, records in side.items():
                    found += [_one_group(members, spec_key if len(side) > 1 else None,
                                         machine if several else None)
                              for machine, members in _by_machine(records).items()]
        elif None in base or None in cand:
            add([r for rs in base.values() for r in rs], [r for rs in cand.values() for r in rs],
                None)
        else:
            split = len(set(base) | set(cand)) > 1
            for spec_key, records in base.items():
                shown = spec_key if split else None
                if spec_key in cand:
                    add(records, cand[spec_key], shown)
                else:
                    only_base.append(_one_group(records, shown))
            only_cand += [_one_group(records, spec_key) for spec_key, records in cand.items()
                          if spec_key not in base]
    return pairs, only_base, only_cand


def spec_differences(baseline: list[dict[str, Any]], candidate: list[dict[str, Any]]
                     ) -> list[str]:
    """The spec fields whose values never meet across the two sides ("steps: 20 vs 30"): why
    no spec matched. Fields that only label a run (suite, seed, environment) are left out."""
    names = sorted({name for record in baseline + candidate for name in record["spec"]}
                   - NOT_IDENTITY)
    found = []
    for name in names:
        before = {plain(spec_value(r["spec"], name)) for r in baseline}
        after = {plain(spec_value(r["spec"], name)) for r in candidate}
        if before.isdisjoint(after):
            found.append(f"{name}: {', '.join(sorted(before))} vs {', '.join(sorted(after))}")
    return found
