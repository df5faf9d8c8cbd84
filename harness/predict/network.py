"""The network a prediction runs over: α and β per collective, calibrated or assumed.

Calibrated networks carry one link per collective and measured world size (from
`dtbench comm` fits, see calibration.py); a network given as numbers or a named preset uses
one link for everything and is labelled an assumption wherever it is shown.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from harness.core.errors import UsageError
from harness.predict.costs import ALGORITHMS, Link, cost

# name -> (description, link). Published orders of magnitude, not measurements of this
# machine: latency of a small MPI message and the line rate per direction.
PRESETS = {
    "10gbe": ("10 Gb/s Ethernet, TCP: α 20 µs, 1.25 GB/s", Link(20e-6, 1 / 1.25e9)),
    "ib-100g": ("100 Gb/s InfiniBand EDR: α 1 µs, 12.5 GB/s", Link(1.0e-6, 1 / 12.5e9)),
    "aries": ("Cray Aries (XC40 dragonfly): α 1.3 µs, 10 GB/s injection per node",
              Link(1.3e-6, 1 / 10e9)),
}
ALIASES = {"10g": "10gbe", "10gbit": "10gbe", "ethernet": "10gbe", "ib": "ib-100g",
           "infiniband": "ib-100g", "edr": "ib-100g", "100g-ib": "ib-100g",
           "cray-aries": "aries", "xc40": "aries"}
FALLBACK_ORDER = ("allreduce", "broadcast", "allgather", "reducescatter", "p2p")


@dataclass(frozen=True)
class OpLink:
    """The link behind one collective as measured on `world_size` ranks."""

    op: str
    world_size: int
    link: Link
    source: str


@dataclass(frozen=True)
class Network:
    """Links per collective, the allreduce algorithm family, and where the numbers came from."""

    label: str
    assumed: bool
    links: tuple[OpLink, ...]
    algorithm: str = "ring"

    def link(self, op: str, world_size: int) -> Link:
        """The link of `op` measured nearest to `world_size` (ties: the larger); a collective
        never measured borrows the first of allreduce, broadcast, allgather, ..."""
        for name in (op, *FALLBACK_ORDER):
            found = [entry for entry in self.links if entry.op == name]
            if found:
                best = min(found, key=lambda e: (abs(e.world_size - world_size), -e.world_size))
                return best.link
        raise UsageError(f"network {self.label!r} has no link for {op}")

    def time(self, op: str, nbytes: float, world_size: int) -> float:
        """Seconds for one `op` of `nbytes` on `world_size` ranks (costs.cost)."""
        if world_size <= 1 or (nbytes <= 0 and op != "p2p"):
            return 0.0
        return cost(op, nbytes, world_size, self.link(op, world_size), self.algorithm)

    @property
    def description(self) -> str:
        """The label, marked as an assumption when it is not calibrated here."""
        return f"{self.label} (assumed)" if self.assumed else self.label


def uniform(label: str, link: Link, algorithm: str = "ring") -> Network:
    """One assumed link for every collective."""
    return Network(label, True, (OpLink("p2p", 2, link, label),), algorithm)


def _number(key: str, text: str, source: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UsageError(f"--network {source!r}: {key}={text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"--network {source!r}: {key} must be a finite number >= 0")
    return value


def parse_network(text: str, algorithm: str = "ring") -> Network:
    """A preset name (10GbE, ib-100g, aries) or 'alpha=SECONDS,beta=SECONDS_PER_BYTE'
    (beta may be given as bandwidth=BYTES_PER_SECOND instead); UsageError otherwise."""
    if algorithm not in ALGORITHMS:
        raise UsageError(f"--algorithm {algorithm!r}: choose from {', '.join(ALGORITHMS)}")
    name = text.strip().lower()
    name = ALIASES.get(name, name)
    if name in PRESETS:
        description, link = PRESETS[name]
        return uniform(f"{name}: {description}", link, algorithm)
    values: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        key = key.strip().lower()
        if not sep or key not in ("alpha", "beta", "bandwidth") or key in values:
            raise UsageError(f"--network {text!r}: cannot read {part!r}; give a preset "
                             f"({', '.join(PRESETS)}) or alpha=SECONDS,beta=SECONDS_PER_BYTE")
        values[key] = _number(key, value.strip(), text)
    if "bandwidth" in values and "beta" not in values:
        if values["bandwidth"] == 0:
            raise UsageError(f"--network {text!r}: bandwidth must be above 0")
        values["beta"] = 1 / values.pop("bandwidth")
    if set(values) != {"alpha", "beta"}:
        raise UsageError(f"--network {text!r}: give both alpha and beta (or bandwidth), "
                         f"or a preset ({', '.join(PRESETS)})")
    link = Link(values["alpha"], values["beta"])
    return uniform(f"alpha={link.alpha:g} s, beta={link.beta:g} s/B", link, algorithm)
