"""A cluster of nodes with several devices each: the link between a node's devices, the
network between nodes, and how a collective runs over both (`dtbench predict --topology`).

With d devices a node (the ranks of a run fill nodes in order; n ranks use N = ⌈n/d⌉ nodes),
k network cards a node, intra-node link (α_i, β_i) and network (α_e, β_e), a collective of
S bytes (nccl-tests' buffer) costs, per algorithm:

- ring: one ring through every device, a node's devices adjacent, so that 2(N-1) of
  allreduce's 2(n-1) steps cross the network (NCCL's tuning model, src/graph/tuning.cc):
  2(N-1)·α_e + 2(n-N)·α_i + 2(n-1)/n·S·max(β_i, β_e/k). Half the steps and bytes for
  all-gather and reduce-scatter.
- hierarchical (allreduce; Horovod's hierarchical allreduce, Goyal et al.'s three phases):
  reduce-scatter inside the node, allreduce of each device's S/d across the N nodes (the
  d streams share the node's k cards: β_e·d/k, `inter_algorithm` ring or halving-doubling),
  all-gather inside the node.
- tree (allreduce; NCCL's trees): a chain through the node's devices, a binary tree over the
  nodes, up and down: 2((d-1)·α_i + ⌈log2 N⌉·α_e) + 2·S·max(β_i, β_e/k).
- auto: the cheapest of the three for each message, as NCCL's tuner chooses.

One node (N = 1) prices everything on the intra-node link with the flat formulas of costs.py;
one device a node (d = 1) gives exactly the flat model over the network. Point-to-point
messages cross the network (a parameter server's, a pipeline's neighbours' on other nodes).
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness.core.errors import UsageError
from harness.predict.costs import Link, coefficients, cost, log2ceil
from harness.predict.links import link_preset
from harness.predict.network import Network, OpLink, scaled_link

TOPOLOGY_ALGORITHMS = ("auto", "ring", "hierarchical", "tree")
INTER_ALGORITHMS = ("ring", "halving-doubling")
KEYS = ("devices", "intra", "inter", "nics", "algorithm", "inter_algorithm")


@dataclass(frozen=True)
class Topology(Network):
    """Nodes of `devices` ranks joined by `intra`, the nodes by `inter` through `nics` cards
    each; `algorithm` one of TOPOLOGY_ALGORITHMS. A Network to every strategy model."""

    devices: int = 1
    intra: Link = Link(0.0, 0.0)
    inter: Link = Link(0.0, 0.0)
    nics: int = 1
    inter_algorithm: str = "ring"

    def nodes(self, world_size: int) -> int:
        return math.ceil(world_size / self.devices)

    def link(self, op: str, world_size: int) -> Link:
        """The link a message crosses: the network for point-to-point messages and once the
        ranks span nodes."""
        return self.intra if op != "p2p" and world_size <= self.devices else self.inter

    def time(self, op: str, nbytes: float, world_size: int) -> float:
        if world_size <= 1 or (nbytes <= 0 and op != "p2p"):
            return 0.0
        if op == "p2p":  # the models call it with two ranks: priced across the network
            return cost("p2p", nbytes, 2, self.inter)
        if world_size <= self.devices:  # one node
            flat = "ring" if self.algorithm in ("auto", "hierarchical") else self.algorithm
            return cost(op, nbytes, world_size, self.intra, flat)
        choices = {name: self.priced(name, op, nbytes, world_size)
                   for name in TOPOLOGY_ALGORITHMS[1:]}
        return min(choices.values()) if self.algorithm == "auto" else choices[self.algorithm]

    def priced(self, algorithm: str, op: str, nbytes: float, p: int) -> float:
        """Seconds of `op` on p ranks spanning nodes by one algorithm (the module's table);
        hierarchical and tree price allreduce, other collectives run the ring."""
        d, nodes = self.devices, self.nodes(p)
        beta = max(self.intra.beta, self.inter.beta / self.nics)
        if algorithm == "hierarchical" and op == "allreduce":
            shared = Link(self.inter.alpha, self.inter.beta * d / self.nics)
            return (cost("reducescatter", nbytes, d, self.intra)
                    + cost("allreduce", nbytes / d, nodes, shared, self.inter_algorithm)
                    + cost("allgather", nbytes, d, self.intra))
        if algorithm == "tree" and op == "allreduce":
            return (2 * ((d - 1) * self.intra.alpha + log2ceil(nodes) * self.inter.alpha)
                    + 2 * nbytes * beta)
        steps, share = coefficients(op, "ring", p)
        crossing = steps * (nodes - 1) / (p - 1)  # the steps that leave a node
        return crossing * self.inter.alpha + (steps - crossing) * self.intra.alpha \
            + share * nbytes * beta

    def scaled(self, factors: Mapping[str, tuple[float, float]]) -> Network:
        """The topology with its "intra" and "inter" links scaled by (α, β) factors."""
        if not factors:
            return self
        return replace(self, intra=scaled_link(self.intra, factors.get("intra")),
                       inter=scaled_link(self.inter, factors.get("inter")))

    def check_ranks(self, world_size: int) -> None:
        """UsageError where `world_size` ranks do not fill whole nodes (one partial node is
        fine: fewer ranks than a node's devices)."""
        if world_size > self.devices and world_size % self.devices:
            raise UsageError(f"--topology: {self.devices} devices a node do not divide "
                             f"{world_size} ranks")

    @property
    def description(self) -> str:
        return f"{self.label} (assumed)"


def _count(key: str, value: Any, text: str) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise UsageError(f"--topology {text!r}: {key}={value!r} is not a whole number") from None
    if number < 1:
        raise UsageError(f"--topology {text!r}: {key} must be at least 1")
    return number


def _fields(text: str) -> dict[str, Any]:
    """KEY=VALUE,... or the path of a JSON file holding an object of the same keys."""
    path = Path(text)
    if text.endswith(".json") or path.is_file():
        try:
            found = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise UsageError(f"--topology {text}: cannot read ({exc})") from None
        if not isinstance(found, dict):
            raise UsageError(f"--topology {text}: expected a JSON object of {', '.join(KEYS)}")
        return found
    found = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep:
            raise UsageError(f"--topology {text!r}: cannot read {part!r}; expected KEY=VALUE "
                             f"with keys {', '.join(KEYS)}")
        found[key.strip().lower()] = value.strip()
    return found


def parse_topology(text: str, algorithm: str = "auto") -> Topology:
    """'devices=8,intra=nvlink-v100,inter=100gbe-roce[,nics=1,algorithm=auto,
    inter_algorithm=ring]' (or a JSON file of those keys); links are named presets (links.py).
    UsageError names what does not parse."""
    fields = _fields(text)
    unknown = sorted(set(fields) - set(KEYS))
    if unknown:
        raise UsageError(f"--topology {text!r}: unknown key(s) {', '.join(unknown)}; "
                         f"known: {', '.join(KEYS)}")
    missing = [key for key in ("devices", "inter") if key not in fields]
    if missing:
        raise UsageError(f"--topology {text!r}: give {' and '.join(missing)} (e.g. "
                         "devices=8,intra=nvlink-v100,inter=100gbe-roce)")
    devices = _count("devices", fields["devices"], text)
    nics = _count("nics", fields.get("nics", 1), text)
    inter = link_preset(str(fields["inter"]), "--topology inter")
    intra = link_preset(str(fields.get("intra", "pcie3")), "--topology intra")
    chosen = str(fields.get("algorithm", algorithm)).lower()
    if chosen not in TOPOLOGY_ALGORITHMS:
        raise UsageError(f"--topology {text!r}: algorithm {chosen!r}; choose from "
                         f"{', '.join(TOPOLOGY_ALGORITHMS)}")
    across = str(fields.get("inter_algorithm", "ring")).lower()
    if across not in INTER_ALGORITHMS:
        raise UsageError(f"--topology {text!r}: inter_algorithm {across!r}; choose from "
                         f"{', '.join(INTER_ALGORITHMS)}")
    label = (f"{devices} device(s) a node over {intra.name} ({intra.summary}), nodes over "
             f"{nics} x {inter.name} ({inter.summary}), {chosen}"
             + (f" ({across} across nodes)" if chosen in ("auto", "hierarchical") else ""))
    return Topology(label, True, (OpLink("p2p", 2, inter.link, label),), chosen,
                    devices=devices, intra=intra.link, inter=inter.link, nics=nics,
                    inter_algorithm=across)
