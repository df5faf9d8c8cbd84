"""Which machine's records calibrate a prediction: this machine's (the records whose hardware
key is its own: the same CPU model, stepping, ISA and usable cores, whatever the host), or
those of the machine --machine names; never several pooled. A store that holds one machine
alone calibrates from it, and says so.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from harness.core.errors import UsageError
from harness.machine.hardware import hardware_key
from harness.records.experiment import machine_of


def hardware_of(record: dict[str, Any]) -> str:
    """A record's hardware key: as it was stored, else computed from its machine fields."""
    machine = record.get("machine")
    machine = machine if isinstance(machine, dict) else {}
    stored = machine.get("hardware_key")
    return stored if isinstance(stored, str) and stored else hardware_key(machine)


def this_hardware() -> str:
    """The hardware key a record made here would carry."""
    from harness.machine.fingerprint import machine_info

    return str(machine_info()["hardware_key"])


@dataclass
class Chosen:
    """The records of one machine's hardware, its label and why it was chosen."""

    records: list[dict[str, Any]]
    label: str = ""
    why: str = ""
    warnings: list[str] = field(default_factory=list)


def _label(records: list[dict[str, Any]]) -> str:
    """The machine's label as its single-node records give it (a 2-node record adds nodes)."""
    labels = Counter(machine_of(r) for r in records)
    return min(labels, key=lambda label: (" nodes" in label, -labels[label], label))


def choose_machine(records: list[dict[str, Any]], machine: str | None, where: str,
                   here: str | None = None) -> Chosen:
    """The records of the machine named (by the label reports give it), else of this
    machine's hardware (`here`: its key, found when not given); UsageError where the name
    matches none, or where this machine has none and several others do."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        groups.setdefault(hardware_of(record), []).append(record)
    if not groups:
        return Chosen([])
    labels = {key: _label(found) for key, found in groups.items()}
    held = "; ".join(f"{labels[key]} ({len(found)} records)" for key, found in
                     sorted(groups.items(), key=lambda item: labels[item[0]]))
    if machine is not None:
        wanted = machine.strip().lower()
        keys = [key for key, found in groups.items()
                if any(machine_of(r).lower() == wanted for r in found)]
        if not keys:
            raise UsageError(f"--machine {machine!r}: no calibration record of it in {where}; "
                             f"it holds {held}")
        chosen = [r for key in keys for r in groups[key]]
        return Chosen(chosen, _label(chosen), "--machine")
    here = here or this_hardware()
    if here in groups:
        return Chosen(groups[here], labels[here], "this machine's hardware")
    if len(groups) == 1:
        (key,) = groups
        return Chosen(groups[key], labels[key], "the only machine there", [
            f"{where} holds no record of this machine's hardware: calibrating from "
            f"{labels[key]}, the only machine there"])
    raise UsageError(f"{where} holds no record of this machine's hardware and several "
                     f"others ({held}): name one with --machine NAME (records of several "
                     "machines are never pooled)")
