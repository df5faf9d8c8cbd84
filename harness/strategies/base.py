"""The Strategy seam (docs/spec/strategies.md): how ranks share the work of one training run.

A strategy owns what differs between ways of distributing training: building the model and
optimizer (and the order of compile/IPEX/wrapping), the step (forward, backward, exchange,
update), gradient clipping, which rank does what (its role), which data shard a rank reads,
how many samples a step consumes, whether replicas must agree, and what it measures beyond
the common metrics. Everything else (the loops, timing, peaks, records) is shared.

Planning side (the launching process): `options` are declared on the class
(harness/strategies/strategy_options.py) and resolved here for `run` and `predict` alike, `check`
rejects combinations that cannot work (exit 2), `unsupported` names combinations it does not
implement (a skipped record), `replicas` and `roles` describe the ranks, `traffic` gives the
analytic bytes per step (harness/strategies/volumes.py) that counted bytes are checked against
and predict prices, `step_model` names the function of `dtbench predict` that prices its step
(predict resolves it: predict sits above strategies and may not be imported from here), and
class attributes state the traits that model reads (synchronous, replicas_agree,
local_forward, own_work). A new strategy is this one class, registered by name, and its
tests: run, predict and the docs' tables read it. Rank side: an instance per rank, built with
the run's Recipe.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from backends import COMM_BACKENDS, LAUNCHERS
from harness.comm.meter import CommMeter
from harness.core.errors import UsageError
from harness.core.registry import Registry
from harness.spec.specs import RunSpec
from harness.strategies.clock import PhaseClock, straggle
from harness.strategies.strategy_options import Option
from workloads.layers import LayerFacts

# The layer table a strategy's traffic reads where the model is not the spec's workload (a
# model `dtbench predict` reads for its facts only, a test's); None: the workload's own.
Layers = Sequence[LayerFacts] | None


@dataclass
class Recipe:
    """What is trained, independent of how it is distributed: built by the rank's Trainer."""

    # seeded, on the device, channels_last; compiled unless compiled=False (a strategy that
    # wraps the model compiles the wrapper instead: Recipe.compiled)
    build_model: Callable[..., nn.Module]
    build_optimizer: Callable[[Iterable[Any]], torch.optim.Optimizer]
    optimizer_class: type[torch.optim.Optimizer]
    optimizer_kwargs: dict[str, Any]
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    autocast: Callable[[], Any]
    device: torch.device
    grad_clip: float | None = None
    scaler: Any | None = None
    compile: bool = False
    ipex: Callable[[nn.Module, torch.optim.Optimizer], tuple[nn.Module, Any]] | None = None

    def compiled(self, model: nn.Module) -> nn.Module:
        """The model torch.compile'd when the run asks for it. Strategies that wrap the model
        (DDP, FSDP2) build it uncompiled and compile the wrapper, as PyTorch's DDP notes do:
        compiled inside DDP, the backward is one graph and DDP's buckets cannot overlap it."""
        return torch.compile(model) if self.compile else model  # type: ignore[return-value]


@dataclass
class RankPlace:
    """Where this rank is: its rank, the world, its local rank, and its device."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device


class Strategy(ABC):
    """One way of distributing training; one module per strategy, registered by name."""

    name: ClassVar[str]
    summary: ClassVar[str]
    family: ClassVar[str]
    engine: ClassVar[str]
    options: ClassVar[tuple[Option, ...]] = ()
    # Its step-time model, "module:function" (harness/predict/dataparallel.py and its
    # siblings, or a plugin's own module): a function (Context, nodes) -> StepEstimate that
    # `dtbench predict` imports by this name; "" where predict has none. A subclass that
    # changes only options or traits inherits its parent's.
    step_model: ClassVar[str] = ""
    # Every rank holds a full replica that must equal the others' after a step.
    replicas_agree: ClassVar[bool] = True
    # Ranks wait for each other every step (a dead rank fails the run).
    synchronous: ClassVar[bool] = True
    # A synchronous step's workers compute on one model (their losses, weighted by samples,
    # are its loss over the step's batch); False where each trains its own copy between
    # exchanges (compare --trajectory then cannot average them).
    one_model: ClassVar[bool] = True
    # A worker may die without failing the run (under the local launcher).
    tolerates_worker_loss: ClassVar[bool] = False
    # Every rank takes training steps (none only serves others): all of them can stop on
    # rank 0's word after any step (a throughput run's precision target).
    all_step: ClassVar[bool] = True
    # Communication backends it can run on (with several ranks): every one the run accepts
    # unless the class narrows them (and says why in comm_reason).
    comms: ClassVar[tuple[str, ...]] = tuple(c for c in COMM_BACKENDS.names() if c != "none")
    # why the communication backends not in `comms` cannot run it (the refusal says so)
    comm_reason: ClassVar[str] = ""
    launchers: ClassVar[tuple[str, ...]] = tuple(LAUNCHERS.names())
    # Whether set-up applies Recipe.ipex (ipex.optimize of the model and its optimizer).
    uses_ipex: ClassVar[bool] = False
    # Each rank runs the whole forward pass with no communication in it, so its forward phase
    # against a single-rank run's tells compute error from communication error (predict).
    local_forward: ClassVar[bool] = True
    # What the strategy's own machinery does once per step on every rank whatever their
    # number, which a single-rank run with a process group therefore measures (predict adds
    # it to the step); empty when there is no such work or one rank does not show it.
    own_work: ClassVar[str] = ""

    # ---------------------------------------------------------------- planning side
    @classmethod
    def option(cls, key: str) -> Option | None:
        """The option named `key` or aliased by it; None when this strategy has none."""
        return next((o for o in cls.options if key in o.names), None)

    @classmethod
    def parse_options(cls, raw: Mapping[str, Any], *, model: bool = False
                      ) -> tuple[tuple[str, Any], ...]:
        """Typed, validated given options by their names (aliases resolved), sorted by name;
        UsageError for an option this strategy does not take, and (unless for the step-time
        `model`) for a model assumption, which a run cannot honour."""
        parsed: dict[str, Any] = {}
        for key, value in raw.items():
            option = cls.option(key)
            if option is None:
                known = ", ".join(o.name for o in cls.options) or "none"
                raise UsageError(f"strategy {cls.name} takes no option {key!r}; its options: "
                                 f"{known}")
            if option.assumption and not model:
                raise UsageError(f"--strategy-opt {key}: an assumption of `dtbench predict` "
                                 f"about {cls.name}, not an option of a run: "
                                 f"{option.assumption}")
            parsed[option.name] = option.parse(value, cls.name)
        return tuple(sorted(parsed.items()))

    @classmethod
    def resolve_options(cls, raw: Mapping[str, Any], *, model: bool = False) -> dict[str, Any]:
        """Every option with its value, the default where not given: what a run of this
        strategy uses (or, with `model`, what the step-time model prices, its assumptions
        included). `run` and `predict` both resolve through here."""
        values = {o.name: o.default for o in cls.options if model or not o.assumption}
        values.update(cls.parse_options(raw, model=model))
        return dict(sorted(values.items()))

    @classmethod
    def option_value(cls, spec: RunSpec, name: str) -> Any:
        """An option of the spec, or its default."""
        default = next(o.default for o in cls.options if o.name == name)
        return spec.options.get(name, default)

    @classmethod
    def check(cls, spec: RunSpec) -> None:
        """UsageError for a combination this strategy cannot run (say why)."""
        if spec.world_size > 1 and spec.comm not in cls.comms:
            raise UsageError(f"strategy {cls.name} runs over {', '.join(cls.comms)}, not "
                             f"--comm {spec.comm}"
                             + (f": {cls.comm_reason}" if cls.comm_reason else ""))
        if spec.launcher not in cls.launchers:
            raise UsageError(f"strategy {cls.name} is started by {', '.join(cls.launchers)}, "
                             f"not --launcher {spec.launcher}")

    @classmethod
    def unsupported(cls, spec: RunSpec) -> str | None:
        """Why this valid spec is not implemented (a skipped record), or None."""
        return None

    @classmethod
    def replicas(cls, spec: RunSpec) -> int:
        """Data-parallel replicas, each taking batch_per_rank samples a step."""
        return spec.world_size

    @classmethod
    def replicas_match(cls, spec: RunSpec) -> bool:
        """Whether every rank's full replica must equal the others' after each step."""
        return cls.replicas_agree and spec.world_size > 1

    @classmethod
    def roles(cls, spec: RunSpec) -> list[str]:
        """Each rank's role, by global rank."""
        return ["worker"] * spec.world_size

    @classmethod
    def loss_ranks(cls, spec: RunSpec) -> list[int]:
        """The ranks whose per-step losses a record's trajectory keeps: one per data shard
        (the ranks of a tensor-parallel group or a pipeline compute one loss between them)."""
        return list(range(spec.world_size))

    @classmethod
    @abstractmethod
    def traffic(cls, spec: RunSpec, param_bytes: float, layers: Layers = None
                ) -> dict[str, float]:
        """Analytic bytes a rank sends per step, by kind (the per-rank mean), under the one
        element size and header rule of harness/strategies/volumes.py: what the byte counters
        are checked against and what `dtbench predict` reports. Every strategy states its
        own, none inherits another's. `layers`: the model's layer table where it is not the
        spec's workload (a model predict reads for its facts only)."""

    # ---------------------------------------------------------------- rank side
    def __init__(self, spec: RunSpec, place: RankPlace, recipe: Recipe,
                 meter: CommMeter | None) -> None:
        self.spec = spec
        self.place = place
        self.recipe = recipe
        self.meter = meter
        self.clock = PhaseClock(place.device)
        self.straggler_factor = 1.0  # --straggler: set by the rank's trainer
        # the test hook DTBENCH_FAULT, for a fault inside a step: set by the rank's trainer
        self.fault: Callable[[int], None] = lambda step: None
        self.model: nn.Module | None = None
        self.optimizer: Any = None

    @property
    def role(self) -> str:
        return self.roles(self.spec)[self.place.rank]

    def straggle(self) -> None:
        """With --straggler on this rank: idle (FACTOR-1) times this step's compute so far,
        after the backward pass and before the exchange (where a slow worker's lateness
        shows: its gradient is late, and for a parameter server, stale)."""
        factor = self.straggler_factor
        if factor <= 1.0:
            return
        # On a GPU so_far waits for the step's compute to finish: the device then stays idle
        # for the delay, since nothing is queued behind it.
        delay = (factor - 1.0) * self.clock.so_far("forward", "backward")
        straggle(delay, self.spec.straggler_work, self.place.device)
        self.clock.add("straggler_delay", delay)

    @property
    def serves(self) -> bool:
        """Whether this rank serves others (a parameter server) instead of taking steps."""
        return False

    def agree_to_stop(self, reached: bool) -> bool:
        """Rank 0's verdict on the quality target, for every rank (rank 0 logs and reports the
        run). Ranks whose models differ between averages (localsgd, gossip) can judge apart,
        and a rank that stopped alone leaves its peers waiting in a collective it never
        joins: one 8-byte broadcast per evaluation."""
        if not self.spec.distributed:
            return reached
        import torch.distributed as dist

        verdict = torch.tensor([1 if reached else 0], dtype=torch.int64,
                               device=self.place.device)
        dist.broadcast(verdict, src=0)
        return bool(verdict.item())

    def serve(self, progress: Callable[[str, int, int], None] | None = None,
              total_steps: int = 0) -> None:
        """A serving rank's work: answer the workers until they are all done."""
        raise NotImplementedError(f"strategy {self.name} has no serving ranks")

    def served_rounds(self) -> float:
        """Steps per worker a serving rank served (its bytes per step divide by this)."""
        return 1.0

    @abstractmethod
    def setup(self) -> None:
        """Build and wrap the model and optimizer (self.model, self.optimizer)."""

    def data_shard(self) -> tuple[int, int]:
        """(index, count) of the data shard this rank reads."""
        return self.place.rank, self.spec.world_size

    @abstractmethod
    def step(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """One training step: forward, backward, exchange, update; the detached loss."""

    def eval_model(self) -> nn.Module:
        """The module that evaluates quality (time-to-train)."""
        assert self.model is not None
        return self.model

    def model_to_evaluate(self) -> nn.Module:
        """The model whose quality an evaluation reports: the state after every update the
        rank's steps counted. Called once per evaluation, on every rank that evaluates; a
        strategy whose ranks train on a copy that lags the true state (the asynchronous
        rules: the servers hold it) brings that state in here, so it may communicate."""
        return self.eval_model()

    def state_bytes(self) -> dict[str, int]:
        """Bytes of parameters, gradients and optimizer state this rank holds."""
        assert self.model is not None
        return tensor_bytes(self.model, self.optimizer)

    def step_stats(self) -> dict[str, Any]:
        """Strategy-specific statistics of the run (staleness, bubble, ...)."""
        return {}

    def finish(self) -> None:
        """Release what the strategy holds (threads, subgroups) at the end of the run."""


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """A DTensor's local shard, or the tensor itself."""
    to_local = getattr(tensor, "to_local", None)
    return to_local() if callable(to_local) else tensor


def _nbytes(tensor: torch.Tensor) -> int:
    local = _local(tensor)
    return int(local.numel() * local.element_size())


def tensor_bytes(model: nn.Module, optimizer: Any) -> dict[str, int]:
    """Bytes of the parameters, gradients and optimizer state tensors this rank holds (the
    local shards of sharded ones): what sharding saves, which resident memory alone hides."""
    parameters = list(model.parameters())
    state = 0
    optimizers = [optimizer] if optimizer is not None else []
    inner = getattr(optimizer, "optim", None)  # ZeroRedundancyOptimizer keeps a local one
    if inner is not None:
        optimizers = [inner]
    for opt in optimizers:
        for entry in getattr(opt, "state", {}).values():
            for value in entry.values():
                if isinstance(value, torch.Tensor) and value.dim() > 0:
                    state += _nbytes(value)
    return {"parameters": sum(_nbytes(p) for p in parameters),
            "gradients": sum(_nbytes(p.grad) for p in parameters if p.grad is not None),
            "optimizer": state}


def clip_gradients(model: nn.Module, max_norm: float | None) -> None:
    if max_norm:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)


def backward(loss: torch.Tensor, scaler: Any | None) -> None:
    if scaler is not None:
        scaler.scale(loss).backward()
    else:
        loss.backward()


def optimizer_step(optimizer: Any, scaler: Any | None, model: nn.Module,
                   max_norm: float | None) -> None:
    """Clip (unscaled) gradients, then step; with a grad scaler, through it."""
    if scaler is not None:
        if max_norm:
            scaler.unscale_(optimizer)
        clip_gradients(model, max_norm)
        scaler.step(optimizer)
        scaler.update()
    else:
        clip_gradients(model, max_norm)
        optimizer.step()


def broadcast_from_first(module: nn.Module, group: Any = None, src: int = 0) -> None:
    """Make every rank's parameters and buffers rank `src`'s (the same seed already gives the
    same values; this makes sure, and costs one broadcast per tensor at set-up)."""
    import torch.distributed as dist

    for tensor in list(module.parameters()) + list(module.buffers()):
        dist.broadcast(tensor.data, src=src, group=group)


class StrategyRegistry(Registry[type[Strategy]]):
    """Strategies by name; a class with an abstract method left (traffic, setup, step) is
    refused when it registers, not when a run first builds it."""

    def register(self, name: str) -> Callable[[type[Strategy]], type[Strategy]]:
        add = super().register(name)

        def decorate(entry: type[Strategy]) -> type[Strategy]:
            missing = sorted(getattr(entry, "__abstractmethods__", ()))
            if missing:
                raise TypeError(f"strategy {name!r} does not implement {', '.join(missing)}")
            if entry.name != name:
                raise TypeError(f"strategy class {entry.__name__} is named {entry.name!r}, "
                                f"registered as {name!r}")
            return add(entry)

        return decorate

    def unregister(self, name: str) -> type[Strategy]:
        """Remove a strategy and return it: a test that registers one of its own leaves the
        registry as it found it."""
        entry = self.get(name)
        del self._entries[name]
        return entry


STRATEGIES = StrategyRegistry("strategy")
