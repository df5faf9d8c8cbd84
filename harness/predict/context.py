"""What every strategy model reads (the workload's facts, the calibrated compute and network,
the batch and options) and what it returns (a step estimate)."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from harness.predict.calibration import ComputeCalibration
from harness.predict.network import Network
from harness.predict.overhead import StrategyOverhead
from harness.predict.uncertain import Uncertain
from harness.spec.specs import RunSpec
from harness.strategies import STRATEGIES
from harness.strategies.strategy_options import Option
from harness.strategies.volumes import PARAM_BYTES, activation_bytes
from workloads.layers import LayerFacts, layer_table

__all__ = ["PARAM_BYTES", "Context", "NotModelled", "StepEstimate", "WorkloadFacts"]


class NotModelled(ValueError):
    """This strategy cannot run this configuration (too few nodes, uneven groups, ...)."""


@dataclass(frozen=True)
class WorkloadFacts:
    """A workload at one size, layer by layer (workloads.layers)."""

    workload: str
    size: str
    layers: tuple[LayerFacts, ...]

    @property
    def parameters(self) -> int:
        return sum(layer.parameters for layer in self.layers)

    @property
    def param_bytes(self) -> float:
        return float(self.parameters * PARAM_BYTES)

    @property
    def flops_per_sample(self) -> int:
        return sum(layer.flops for layer in self.layers)

    @property
    def forward_fraction(self) -> float:
        """Share of the FLOPs in the forward pass: how a measured step splits into phases."""
        total = self.flops_per_sample
        return sum(layer.forward_flops for layer in self.layers) / total if total else 1 / 3

    @property
    def linear_layers(self) -> list[LayerFacts]:
        return [layer for layer in self.layers if layer.in_features is not None]


@lru_cache(maxsize=16)
def workload_facts(workload: str, size: str) -> WorkloadFacts:
    """The layer table of a workload at a size, counted once per process."""
    return WorkloadFacts(workload, size, tuple(layer_table(workload, size)))


@dataclass(frozen=True)
class Context:
    """One prediction's inputs apart from the node count.

    batch is per rank under weak scaling (every rank keeps it) and global under strong
    scaling (the ranks share it); options are the strategy's, defaults filled in;
    core_sharing >= 1 slows compute when a node's ranks need more cores than it has;
    overheads are the strategies' measured per-step work (harness.predict.overhead); fusion
    replaces DDP's buckets by Horovod's tensor fusion (dataparallel.fused); strategy is the
    registered name being priced (model.predict sets it), so a step model reads its class's
    traits and its own measured work through it rather than naming a strategy itself; comm
    the backend whose algorithms the bytes follow (gloo's reduce-scatter is an allreduce:
    harness.facts.traffic.wire_bytes), "" for the ring volumes of an assumed network;
    uncertain the inputs' uncertainties its predictions' intervals are drawn from
    (harness.predict.interval).
    """

    facts: WorkloadFacts
    compute: ComputeCalibration
    network: Network
    batch: int
    scaling: str = "weak"
    precision: str = "fp32"
    options: dict[str, Any] = field(default_factory=dict)
    core_sharing: float = 1.0
    overheads: dict[str, StrategyOverhead] = field(default_factory=dict)
    fusion: tuple[float, float] | None = None  # Horovod fusion: (threshold bytes, cycle s)
    strategy: str = ""
    comm: str = ""
    uncertain: tuple[Uncertain, ...] = ()

    @property
    def element_bytes(self) -> int:
        """Bytes per activation element on the wire (volumes.activation_bytes: the one rule
        the strategies' traffic follows too)."""
        return activation_bytes(self.precision)

    def rank_batch(self, workers: int) -> float:
        """Samples one of `workers` data-parallel ranks computes per step."""
        return self.batch if self.scaling == "weak" else self.batch / workers

    def compute_time(self, samples: float, synchronous_ranks: int = 1) -> float:
        """Seconds to compute `samples` on one rank, as the slowest of the ranks that wait for
        each other every step (ComputeCalibration.step)."""
        return self.compute.step(samples, synchronous_ranks) * self.core_sharing

    def option(self, name: str) -> Any:
        """An option of the strategy priced (its class's default filled in where not given)."""
        return self.options[name]

    def shared_option(self, option: Option) -> Any:
        """The value of an option that machinery shared between strategies reads (DDP's
        buckets inside localsgd's subgroups and hybrid's groups, the overlap of FSDP2's
        exchange in fsdp-tp): the strategy's own where it declares it, else the declared
        default of the strategy that owns it."""
        return self.options.get(option.name, option.default)

    def run_at(self, nodes: int, batch: float | None = None) -> RunSpec:
        """The run this context describes at `nodes` ranks (`batch` samples a rank, else the
        context's): the strategy class's traits (servers, workers, pushers) and its bytes are
        read through it rather than known here twice."""
        if batch is None:
            batch = self.batch if self.scaling == "weak" else max(1, self.batch // nodes)
        return RunSpec(self.facts.workload, self.facts.size, precision=self.precision,
                       comm=self.comm or "none", nproc_per_node=nodes,
                       batch_per_rank=int(round(batch)), strategy=self.strategy,
                       strategy_options=tuple(sorted(self.options.items())))

    def traffic(self, nodes: int, batch: float | None = None) -> dict[str, float]:
        """The bytes a rank sends per step at `nodes` ranks, by kind: the strategy class's
        own traffic() of run_at(nodes, batch), over this model's layer table."""
        return STRATEGIES.get(self.strategy).traffic(self.run_at(nodes, batch),
                                                     self.facts.param_bytes, self.facts.layers)

    def with_overhead(self, estimate: StepEstimate, missing: str = "") -> StepEstimate:
        """The estimate plus the strategy's measured per-step work, said in its notes (or the
        `missing` note when there is no measurement). That work is CPU time in each rank's own
        process, so core sharing slows it as it slows compute; it is added as measured (the
        median step), not as the slowest of n ranks: one run's steps do not separate its
        spread from the compute's."""
        strategy = self.strategy
        measured = self.overheads.get(strategy)
        if measured is None:
            return replace(estimate, notes=(*estimate.notes, missing)) if missing else estimate
        seconds = measured.seconds * self.core_sharing
        note = f"{strategy}'s own work {seconds * 1e3:.1f} ms a step"
        if self.core_sharing != 1:
            note += f" ({measured.seconds * 1e3:.1f} ms x{self.core_sharing:g} core sharing)"
        note += f": {measured.source}"
        return replace(estimate, step_time=estimate.step_time + seconds, overhead=seconds,
                       notes=(*estimate.notes, note))


@dataclass(frozen=True)
class StepEstimate:
    """One step as the model sees it: compute, communication (seconds per labelled
    collective, overlapped or not) and the bytes each rank sends by kind."""

    step_time: float
    samples_per_step: float
    compute_time: float
    comm: dict[str, float]
    volumes: dict[str, float]
    notes: tuple[str, ...] = ()
    bubble: float | None = None
    overhead: float = 0.0  # the strategy's own measured per-step work (Context.with_overhead)

    @property
    def throughput(self) -> float:
        return self.samples_per_step / self.step_time if self.step_time > 0 else float("inf")

    @property
    def comm_time(self) -> float:
        """All communication of a step, hidden behind compute or not."""
        return sum(self.comm.values())

    @property
    def exposed_comm(self) -> float:
        """The part of the step that is neither compute nor the strategy's measured own work:
        waiting on communication (and bubbles)."""
        return max(0.0, self.step_time - self.compute_time - self.overhead)

    @property
    def dominant(self) -> str:
        """The collective that takes the most time ("-" when nothing moves)."""
        busy = {label: t for label, t in self.comm.items() if t > 0}
        return max(busy, key=lambda label: (busy[label], label)) if busy else "-"
