"""The network a prediction runs over: α and β per collective, calibrated or assumed.

Calibrated networks carry one link per collective and measured world size (from
`dtbench comm` fits, see calibration.py); a network given as numbers or a named link
(links.py) uses one link for everything and is labelled an assumption wherever it is shown.
A cluster of several devices per node is a Topology (topology.py), priced the same way.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

from harness.core.errors import UsageError
from harness.predict.costs import ALGORITHMS, Link, cost
from harness.predict.links import LINKS, find_link

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

    def scaled(self, factors: Mapping[str, tuple[float, float]]) -> Network:
        """This network with each link named in `factors` (an OpLink's source: the fit or
        preset behind it) scaled by (α factor, β factor): one draw of their uncertainty."""
        if not factors:
            return self
        return replace(self, links=tuple(
            replace(entry, link=scaled_link(entry.link, factors[entry.source]))
            if entry.source in factors else entry for entry in self.links))


def scaled_link(link: Link, factors: tuple[float, float] | None) -> Link:
    """α and β times their factors (the link itself without any)."""
    return link if factors is None else Link(link.alpha * factors[0], link.beta * factors[1])


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
    """A link's name (links.py: 10gbe-tcp, ib-edr, aries, ...) or
    'alpha=SECONDS,beta=SECONDS_PER_BYTE' (beta may be given as bandwidth=BYTES_PER_SECOND
    instead); UsageError otherwise."""
    if algorithm not in ALGORITHMS:
        raise UsageError(f"--algorithm {algorithm!r}: choose from {', '.join(ALGORITHMS)}")
    preset = find_link(text)
    if preset is not None:
        return uniform(f"{preset.name}: {preset.summary}", preset.link, algorithm)
    values: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        key = key.strip().lower()
        if not sep or key not in ("alpha", "beta", "bandwidth") or key in values:
            raise UsageError(f"--network {text!r}: cannot read {part!r}; give a preset "
                             f"({', '.join(LINKS)}) or alpha=SECONDS,beta=SECONDS_PER_BYTE")
        values[key] = _number(key, value.strip(), text)
    if "bandwidth" in values and "beta" not in values:
        if values["bandwidth"] == 0:
            raise UsageError(f"--network {text!r}: bandwidth must be above 0")
        values["beta"] = 1 / values.pop("bandwidth")
    if set(values) != {"alpha", "beta"}:
        raise UsageError(f"--network {text!r}: give both alpha and beta (or bandwidth), "
                         f"or a preset ({', '.join(LINKS)})")
    link = Link(values["alpha"], values["beta"])
    return uniform(f"alpha={link.alpha:g} s, beta={link.beta:g} s/B", link, algorithm)
