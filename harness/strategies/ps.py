"""Parameter-server strategies: ps-sync, ps-async, downpour (DistBelief) and ssp (stale
synchronous parallel, Ho et al. 2013), over harness/comm/paramserver.py.

Ranks 0..W-1 are workers (rank 0 leads, as in every other strategy: it logs and evaluates),
ranks W..n-1 the K servers (`servers=K`). A worker fetches the parameters, computes a gradient
on its own data shard (clipped there: no server sees the whole gradient when K > 1), and
pushes it; the servers update their shards. Workers never update their own parameters.
"""
from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from harness.comm.paramserver import (
    HEADER_BYTES,
    Client,
    Server,
    least_version,
    shard_bounds,
)
from harness.core.errors import UsageError
from harness.spec.specs import RunSpec
from harness.strategies import volumes
from harness.strategies.base import (
    STRATEGIES,
    Layers,
    Option,
    Strategy,
    backward,
    clip_gradients,
)
from harness.strategies.priority import PRIORITY, Puller

SERVERS = Option("servers", int, 1, "server ranks the parameters are sharded over (K)",
                 minimum=1, aliases=("K", "n_servers"))
# Stale gradients act like extra momentum (Mitliagkas et al. 2016, "Asynchrony begets
# momentum"), so the workload's momentum tuned for synchronous SGD is too much for the
# asynchronous rules: at momentum 0.9, ps-async, downpour and hybrid on hep_cnn small missed
# the target in 3 of 9 runs (two ended at chance accuracy). Their servers' default is
# async_momentum(): the workload's for one pusher, less for several. The option overrides it.
MOMENTUM = Option("momentum", float, None, "the servers' SGD momentum in [0, 1) (default: "
                  "the workload's; for ps-async, downpour and hybrid 1 - P(1 - that) with P "
                  "pushers); staleness adds implicit momentum", minimum=0, priced=False)
# The recipe's learning rate was tuned for fresh gradients; a gradient computed t versions ago
# is applied at 1/(1 + t) of it (Zhang et al. 2016, "Staleness-aware async-SGD"). Fresh
# gradients (ps-sync, one worker) keep the full rate.
DAMP_STALE = Option("damp_stale", bool, True, "scale a gradient t versions stale by 1/(1+t) "
                    "(staleness-aware learning rate); false applies all at the full rate",
                    priced=False)


def flat_checksum(flat: torch.Tensor) -> float:
    """Sum of a flat parameter vector in float64: a worker's evaluated parameters and the
    servers' shards can be compared without shipping either."""
    with torch.no_grad():
        return float(flat.detach().double().sum())


def async_momentum(momentum: float, pushers: int) -> float:
    """The servers' default momentum under the asynchronous rule: max(0, 1 - P(1 - μ)) for
    P pushers and the workload's μ (0.9 -> 0.8 for two, 0.6 for four, 0 from ten; unchanged
    for one, so one worker still trains as a single rank does).

    A heuristic, chosen from measurements, not derived: with P pushers a gradient is about
    P - 1 versions stale, which adds momentum of its own (Mitliagkas et al. 2016 model it as
    1 - 1/P), and one version of delay already cuts heavy-ball's stable step×curvature from
    3.8 to 0.1 at μ = 0.9 (benchmarks/delayed_momentum.py). With the staleness-aware
    rate, the effective step a/(P(1 - μ')) is then 1/P² of the synchronous a/(1 - μ) per update,
    1/P per round of P updates. On hep_cnn small with two workers, μ' = 0.8 and 0.6 reached
    the target in every run measured, where 0.9 missed it in 3 of 9
    (docs/measurements/strategies.md)."""
    return max(0.0, round(1.0 - pushers * (1.0 - momentum), 12))


class ParameterServerStrategy(Strategy):
    """Shared by the parameter-server family; subclasses choose the update rule and timing."""

    family = "parameter server"
    engine = ("torch.distributed point-to-point (send, any-source receive) over gloo or "
              "dtbench's MPI process group")
    replicas_agree = False
    synchronous = False
    all_step = False  # the servers serve
    rule: ClassVar[str] = "async"
    comms = ("gloo", "mpi")
    comm_reason = ("its servers receive from any source, which NCCL's process group does not "
                   "do, and frame each message with a header in host memory")

    # -------------------------------------------------------------- planning side
    @classmethod
    def servers(cls, spec: RunSpec) -> int:
        return int(cls.option_value(spec, "servers"))

    @classmethod
    def workers(cls, spec: RunSpec) -> int:
        return spec.world_size - cls.servers(spec)

    @classmethod
    def check(cls, spec: RunSpec) -> None:
        super().check(spec)
        momentum = cls.momentum(spec)
        if momentum is not None and momentum >= 1:
            raise UsageError(f"strategy {cls.name}: momentum={momentum:g} must be "
                             "below 1 (0 is plain SGD)")
        if spec.optimizer != "default" or spec.warmup_epochs > 0:
            raise UsageError(f"strategy {cls.name}: its servers update flat shards of the "
                             "parameters, which hold no layers for --optimizer lars/lamb, and "
                             "count no epochs for --warmup-epochs; --lr-scaling applies")
        if cls.servers(spec) >= spec.world_size:
            raise UsageError(f"strategy {cls.name} with servers={cls.servers(spec)} needs more "
                             f"ranks than servers (at least one worker); world size is "
                             f"{spec.world_size}: use -n {cls.servers(spec) + 1} or more")

    @classmethod
    def replicas(cls, spec: RunSpec) -> int:
        return cls.workers(spec)

    @classmethod
    def roles(cls, spec: RunSpec) -> list[str]:
        return ["worker"] * cls.workers(spec) + ["server"] * cls.servers(spec)

    @classmethod
    def traffic(cls, spec: RunSpec, param_bytes: float, layers: Layers = None
                ) -> dict[str, float]:
        return volumes.parameter_server(param_bytes, spec.world_size,
                                        servers=cls.servers(spec),
                                        push_every=cls.push_every(spec),
                                        fetch_every=cls.fetch_every(spec),
                                        header_bytes=HEADER_BYTES)

    @classmethod
    def push_every(cls, spec: RunSpec) -> int:
        return 1

    @classmethod
    def fetch_every(cls, spec: RunSpec) -> int:
        return 1

    @classmethod
    def bound(cls, spec: RunSpec) -> float:
        """How many clocks a worker may run ahead of the slowest (inf: never waits)."""
        return math.inf

    # -------------------------------------------------------------- rank side
    @property
    def serves(self) -> bool:
        return self.role == "server"

    @classmethod
    def momentum(cls, spec: RunSpec) -> float | None:
        """The servers' SGD momentum where the option is given, else None (the workload's)."""
        value = cls.option_value(spec, "momentum")
        return None if value is None else float(value)

    @classmethod
    def damps_stale(cls, spec: RunSpec) -> bool:
        """Whether the servers damp stale gradients (ps-sync never gets one: no option)."""
        return DAMP_STALE in cls.options and bool(cls.option_value(spec, "damp_stale"))

    @classmethod
    def pushers(cls, spec: RunSpec) -> int:
        """How many ranks push to the servers independently of each other."""
        return cls.workers(spec)

    def server_momentum(self) -> float | None:
        """The servers' SGD momentum: the option where given; under the asynchronous rule,
        async_momentum() of the workload's; else None (the workload's, unchanged)."""
        given = self.momentum(self.spec)
        recipe = self.recipe.optimizer_kwargs.get("momentum")
        if given is not None or self.rule != "async" or not recipe:
            return given
        return async_momentum(float(recipe), self.pushers(self.spec))

    def server_optimizer(self, parameters: list[Any]) -> Any:
        optimizer = self.recipe.build_optimizer(parameters)
        momentum = self.server_momentum()
        if momentum is not None:
            for group in optimizer.param_groups:
                if "momentum" in group:
                    group["momentum"] = momentum
        return optimizer

    def setup(self) -> None:
        spec, place = self.spec, self.place
        model = self.recipe.build_model()
        # Flat views need the default layout (channels_last weights are not contiguous).
        model = model.to(memory_format=torch.contiguous_format)
        flat = parameters_to_vector(model.parameters()).detach()
        workers, servers = self.workers(spec), self.servers(spec)
        bounds = shard_bounds(flat.numel(), servers)
        self.model = model
        self._steps = 0
        if self.serves:
            lo, hi = bounds[place.rank - workers]
            self.server = Server(flat[lo:hi], self.server_optimizer, range(workers), self.rule,
                                 self.bound(spec), self.meter,
                                 damp_stale=self.damps_stale(spec))
            self.model = None
            self._flat = flat[lo:hi]
            return
        self.client = Client(range(workers, workers + servers), bounds, self.meter)
        self.puller = Puller(model, self.client, PRIORITY in self.options
                             and bool(self.option_value(spec, "priority")), self.clock)
        self._flat = flat
        self._accumulated: torch.Tensor | None = None

    def data_shard(self) -> tuple[int, int]:
        return min(self.place.rank, self.workers(self.spec) - 1), self.workers(self.spec)

    def local_gradient(self, inputs: torch.Tensor, targets: torch.Tensor,
                       clip: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Forward and backward on this worker's batch (clipped here when `clip`), the
        straggler's delay, and the gradient as one flat vector (zeros where a parameter got
        none)."""
        recipe, clock, model = self.recipe, self.clock, self.model
        assert model is not None
        for parameter in model.parameters():
            parameter.grad = None
        with clock.phase("forward"), recipe.autocast():
            loss = recipe.loss(model(inputs), targets)
        with clock.phase("backward"):
            backward(loss, recipe.scaler)
            if clip:
                clip_gradients(model, recipe.grad_clip)
        self.straggle()
        gradient = parameters_to_vector(
            p.grad if p.grad is not None else torch.zeros_like(p) for p in model.parameters())
        return loss, gradient

    def step(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        clock, model, spec = self.clock, self.model, self.spec
        assert model is not None and not self.serves
        step = self._steps
        self._back_to_training_copy()
        if step % self.fetch_every(spec) == 0:
            with clock.phase("wait"):
                self.client.step = step
                self.puller.fetch(self._flat, model, least_version(step, self.bound(spec)))
        loss, gradient = self.local_gradient(inputs, targets, clip=True)
        self.puller.after_forward()
        self._accumulated = gradient if self._accumulated is None \
            else self._accumulated + gradient
        self._steps = step + 1
        if self._steps % self.push_every(spec) == 0:
            # The mean of the accumulated gradients: one gradient of an n_push-times larger
            # batch, at the recipe's learning rate. Their sum (an n_push-times larger step)
            # held hep_cnn small at chance accuracy for 8 epochs at n_fetch = n_push = 2.
            with clock.phase("exchange"):
                self.client.step = self._steps
                self.client.push(self._accumulated.div_(self.push_every(spec)))
            self._accumulated = None
        clock.end_step()
        return loss.detach()

    def serve(self, progress: Any = None, total_steps: int = 0) -> None:
        self.server.serve(progress, total_steps)

    def agree_to_stop(self, reached: bool) -> bool:
        """Each worker's own verdict: the servers take no part in a collective, and a worker
        that stops tells them it is done, so the others go on without it."""
        return reached

    def served_rounds(self) -> float:
        return self.server.rounds()

    def eval_model(self) -> nn.Module:
        if self.model is None:  # a server holds a shard, not a model
            raise RuntimeError("a parameter server rank has no model to evaluate")
        return self.model

    def model_to_evaluate(self) -> nn.Module:
        """The servers' parameters after the updates this worker's steps counted, not the copy
        it fetched before its last step (one update behind). Under the clock rule the fetch
        waits for the clocks of every step taken (ps-sync: exactly that many updates); under
        the async rule it takes the servers' state as it stands, which holds this worker's
        last push (a server handles one worker's requests in the order sent). A worker that
        fetches only every n_fetch steps goes back to its own copy at its next step, so
        evaluating does not change what it trains on."""
        model = self.eval_model()
        spec = self.spec
        if self.fetch_every(spec) > 1:
            self._training_copy = (self._flat.clone(), self.client.version)
        self.client.step = self._steps
        least = self._steps if self.rule == "clock" else 0
        self.client.fetch(self._flat, least)
        vector_to_parameters(self._flat, model.parameters())
        self._evaluated = {"evaluated_version": self.client.version,
                           "evaluated_checksum": flat_checksum(self._flat)}
        return model

    def _back_to_training_copy(self) -> None:
        """The parameters (and their version) this worker trained on before an evaluation."""
        saved = getattr(self, "_training_copy", None)
        if saved is not None:
            self._flat.copy_(saved[0])
            self.client.version = saved[1]
            self._training_copy = None

    def state_bytes(self) -> dict[str, int]:
        if self.serves:
            from harness.strategies.base import tensor_bytes

            holder = nn.Module()
            holder.shard = self.server.param
            return tensor_bytes(holder, self.server.optimizer)
        assert self.model is not None
        return {"parameters": sum(p.numel() * p.element_size() for p in self.model.parameters()),
                "gradients": sum(p.grad.numel() * p.grad.element_size()
                                 for p in self.model.parameters() if p.grad is not None),
                "optimizer": 0}

    def step_stats(self) -> dict[str, Any]:
        if self.serves:
            return {**self.server.summary(), "shard_checksum": flat_checksum(self.server.param)}
        return {"steps": self._steps, "fetched_version": self.client.version,
                **self.puller.summary(), **getattr(self, "_evaluated", {})}

    def finish(self) -> None:
        if not self.serves and hasattr(self, "client"):
            self.client.done()


@STRATEGIES.register("ps-async")
class PSAsync(ParameterServerStrategy):
    """Asynchronous: each gradient applied on arrival, then the worker fetches."""

    tolerates_worker_loss = True
    name = "ps-async"
    step_model = "harness.predict.servers:ps_async"
    summary = "parameter server, asynchronous: gradients applied on arrival"
    options: ClassVar[tuple[Option, ...]] = (SERVERS, MOMENTUM, DAMP_STALE, PRIORITY)


@STRATEGIES.register("ps-sync")
class PSSync(ParameterServerStrategy):
    """Synchronous: the mean of every worker's gradient, one update per step."""

    name = "ps-sync"
    step_model = "harness.predict.servers:ps_sync"
    summary = "parameter server, synchronous: all workers' gradients averaged per step"
    options: ClassVar[tuple[Option, ...]] = (SERVERS, MOMENTUM, PRIORITY)  # always fresh
    synchronous = True
    rule = "clock"

    @classmethod
    def bound(cls, spec: RunSpec) -> float:
        return 0.0


@STRATEGIES.register("ssp")
class SSP(ParameterServerStrategy):
    """Stale synchronous parallel: a worker waits only when more than s clocks ahead."""

    name = "ssp"
    step_model = "harness.predict.servers:ssp"
    summary = "stale synchronous parallel: workers at most s clocks ahead of the slowest"
    options: ClassVar[tuple[Option, ...]] = (
        SERVERS,
        MOMENTUM,
        DAMP_STALE,
        Option("staleness", float, None, "the bound s (clocks; inf never waits); required",
               minimum=0, aliases=("s",), priced=False),
        PRIORITY,
    )
    rule = "clock"
    tolerates_worker_loss = True  # the lost worker is dropped from the bound

    @classmethod
    def check(cls, spec: RunSpec) -> None:
        if cls.option_value(spec, "staleness") is None:
            raise UsageError("strategy ssp needs its staleness bound: --strategy-opt s=N "
                             "(0 is ps-sync, inf never waits)")
        super().check(spec)

    @classmethod
    def bound(cls, spec: RunSpec) -> float:
        return float(cls.option_value(spec, "staleness"))


@STRATEGIES.register("downpour")
class Downpour(ParameterServerStrategy):
    """DistBelief's Downpour SGD: fetch every n_fetch steps, push every n_push steps."""

    name = "downpour"
    step_model = "harness.predict.servers:downpour"
    tolerates_worker_loss = True
    summary = "Downpour SGD: fetch every n_fetch, push the mean gradient every n_push"
    options: ClassVar[tuple[Option, ...]] = (
        SERVERS,
        MOMENTUM,
        DAMP_STALE,
        Option("n_fetch", int, 1, "steps between parameter fetches", minimum=1),
        Option("n_push", int, 1, "steps between gradient pushes (their mean)", minimum=1),
        Option("adagrad", bool, False, "servers apply updates with Adagrad (DistBelief)",
               priced=False),
        PRIORITY,
    )

    @classmethod
    def push_every(cls, spec: RunSpec) -> int:
        return int(cls.option_value(spec, "n_push"))

    @classmethod
    def fetch_every(cls, spec: RunSpec) -> int:
        return int(cls.option_value(spec, "n_fetch"))

    def server_optimizer(self, parameters: list[Any]) -> Any:
        if self.option_value(self.spec, "adagrad"):
            return torch.optim.Adagrad(parameters, lr=self.recipe.optimizer_kwargs.get(
                "lr", 0.01))
        return super().server_optimizer(parameters)
