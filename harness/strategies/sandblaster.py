"""sandblaster: DistBelief's batch method (Dean et al. 2012, §4.2), Sandblaster L-BFGS.

Ranks 0..W-1 are model replicas (rank 0 leads: it logs and evaluates), rank W the
coordinator, ranks W+1.. the K parameter-server shards. Every replica reads the same batch
(one replica's batch: `--batch-size` is the batch the method takes a step on); a step is one
L-BFGS iteration on it. A replica fetches the parameters at the start of the batch, then asks
the coordinator for a portion (1/`portions` of the batch), computes its gradient, asks whether
it is kept (the first copy of a portion is), pushes a kept gradient to the shards and asks
for the next; fast replicas take more portions, and at the end of a batch a free replica runs
a backup copy of a portion that is overdue (harness/strategies/sandblaster_scheduler.py). With every
portion in, the coordinator runs the L-BFGS iteration as small commands on the shards
(harness/strategies/lbfgs.py), which hold the parameters and the history: no vector leaves
them. The serving loops are harness/strategies/sandblaster_servers.py, the wire
harness/comm/sandblaster.py.
"""
from __future__ import annotations

import math
import time
from typing import Any, ClassVar

import torch
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from harness.comm.paramserver import shard_bounds
from harness.comm.sandblaster import (
    ASK,
    BYE,
    FETCH,
    FINISH,
    HEADER,
    HEADER_BYTES,
    PUSH,
    RESULT_BYTES,
    TAG_ANSWER,
    TAG_COORD,
    TAGS,
    header,
)
from harness.comm.wire import receive_fetched, send
from harness.core.errors import UsageError
from harness.spec.specs import RunSpec
from harness.strategies import volumes
from harness.strategies.base import STRATEGIES, Layers, Option, Strategy, backward
from harness.strategies.clock import straggle
from harness.strategies.ps import SERVERS, flat_checksum
from harness.strategies.sandblaster_servers import CoordinatorLoop, ShardLoop


@STRATEGIES.register("sandblaster")
class Sandblaster(Strategy):
    """Sandblaster L-BFGS: a coordinator, sharded parameters and history, portions of a batch
    balanced over the replicas with backup copies."""

    name = "sandblaster"
    step_model = "harness.predict.servers:sandblaster"
    summary = "Sandblaster L-BFGS: portions of a batch balanced over replicas; the coordinator " \
              "commands the shards, which hold parameters and history (DistBelief)"
    family = "parameter server, batch (L-BFGS)"
    engine = ("torch.distributed point-to-point (send, any-source receive) over gloo or "
              "dtbench's MPI process group")
    options: ClassVar[tuple[Option, ...]] = (
        Option("history", int, 10, "L-BFGS history pairs (s, y) the shards keep (m)",
               minimum=1, aliases=("m",)),
        Option("portions", int, 8, "portions a batch is cut into (their sizes differ by one at "
               "most); at most the batch", minimum=1),
        Option("backup_after", float, 1.5, "a portion running this many times the median "
               "portion gets a backup copy on a free replica (inf: no backups)", minimum=0,
               priced=False),
        Option("lr", float, 1.0, "the L-BFGS step (torch.optim.LBFGS's lr; no line search)",
               minimum=0, priced=False),
        SERVERS,
    )
    replicas_agree = False     # only the shards hold the parameters between batches
    tolerates_worker_loss = True
    all_step = False
    comms = ("gloo", "mpi")
    comm_reason = ("its coordinator and shards receive from any source, which NCCL's "
                   "process group does not do, and frame each message with a header in "
                   "host memory")
    local_forward = True

    # -------------------------------------------------------------- planning side
    @classmethod
    def servers(cls, spec: RunSpec) -> int:
        return int(cls.option_value(spec, "servers"))

    @classmethod
    def workers(cls, spec: RunSpec) -> int:
        return spec.world_size - 1 - cls.servers(spec)

    @classmethod
    def check(cls, spec: RunSpec) -> None:
        super().check(spec)
        if cls.workers(spec) < 1:
            raise UsageError(f"strategy sandblaster needs a replica, the coordinator and "
                             f"servers={cls.servers(spec)} shard(s): -n "
                             f"{cls.servers(spec) + 2} or more (world size {spec.world_size})")
        portions = int(cls.option_value(spec, "portions"))
        if portions > spec.batch_per_rank:
            raise UsageError(f"strategy sandblaster: portions={portions} is more than the "
                             f"batch of {spec.batch_per_rank} samples")
        if spec.optimizer != "default" or spec.warmup_epochs > 0:
            raise UsageError("strategy sandblaster trains with its own L-BFGS: --optimizer "
                             "and --warmup-epochs do not apply")

    @classmethod
    def replicas(cls, spec: RunSpec) -> int:
        return 1

    @classmethod
    def roles(cls, spec: RunSpec) -> list[str]:
        return ["worker"] * cls.workers(spec) + ["coordinator"] + ["server"] * cls.servers(spec)

    @classmethod
    def traffic(cls, spec: RunSpec, param_bytes: float, layers: Layers = None
                ) -> dict[str, float]:
        return volumes.sandblaster(param_bytes, spec.world_size, servers=cls.servers(spec),
                                   portions=int(cls.option_value(spec, "portions")),
                                   history=int(cls.option_value(spec, "history")),
                                   header_bytes=HEADER_BYTES, result_bytes=RESULT_BYTES)

    # -------------------------------------------------------------- rank side
    @property
    def serves(self) -> bool:
        return self.role != "worker"

    def setup(self) -> None:
        spec = self.spec
        model = self.recipe.build_model().to(memory_format=torch.contiguous_format)
        flat = parameters_to_vector(model.parameters()).detach()
        workers, servers = self.workers(spec), self.servers(spec)
        self.coordinator = workers
        self.shards = list(range(workers + 1, workers + 1 + servers))
        self.bounds = shard_bounds(flat.numel(), servers)
        self._steps = 0
        self.model = model
        self.loop: Any = None
        if self.role == "coordinator":
            self.model = None
            self.loop = CoordinatorLoop(range(workers), self.shards,
                                        int(self.option_value(spec, "portions")),
                                        float(self.option_value(spec, "backup_after")),
                                        int(self.option_value(spec, "history")),
                                        float(self.option_value(spec, "lr")), self.meter)
        elif self.role == "server":
            lo, hi = self.bounds[self.place.rank - workers - 1]
            self.model = None
            self.loop = ShardLoop(flat[lo:hi].clone(), self.coordinator, self.meter)
        else:
            self._flat = flat
            self.version = 0
            self.portions_run = 0

    def data_shard(self) -> tuple[int, int]:
        return 0, 1  # every replica reads the whole batch; portions split it

    # -------------------------------------------------------------- a replica
    def _fetch(self, least: int) -> None:
        for shard in self.shards:
            send(self.meter, "control", header(FETCH, self._steps, least), shard, TAGS.request)
        # the reply header is FETCH(version)
        self.version = receive_fetched(self._flat, self.shards, self.bounds, HEADER, TAGS,
                                       version_word=1)
        assert self.model is not None
        vector_to_parameters(self._flat, self.model.parameters())

    def _ask(self, op: int, *words: float, alpha: float = 0.0) -> list[float]:
        send(self.meter, "control", header(op, self._steps, *words, alpha=alpha),
             self.coordinator, TAG_COORD)
        answer = HEADER.empty()
        torch.distributed.recv(answer, src=self.coordinator, tag=TAG_ANSWER)
        return answer.tolist()

    def _portion(self, inputs: torch.Tensor, targets: torch.Tensor, portion: int
                 ) -> tuple[int, float, torch.Tensor]:
        """The samples of one portion, their summed loss and the gradient of that sum (the
        shards divide by the batch: portions of unequal sizes weigh by their samples); a
        straggler idles (FACTOR-1) times that compute."""
        model, recipe, clock = self.model, self.recipe, self.clock
        assert model is not None
        lo, hi = shard_bounds(inputs.shape[0],
                              int(self.option_value(self.spec, "portions")))[portion]
        part = slice(lo, hi)
        started = time.perf_counter()
        for parameter in model.parameters():
            parameter.grad = None
        with clock.phase("forward"), recipe.autocast():
            loss = recipe.loss(model(inputs[part]), targets[part])
        with clock.phase("backward"):
            backward(loss, recipe.scaler)
        if self.straggler_factor > 1.0:
            delay = (self.straggler_factor - 1.0) * (time.perf_counter() - started)
            straggle(delay, self.spec.straggler_work, self.place.device)
            clock.add("straggler_delay", delay)
        self.portions_run += 1
        gradient = parameters_to_vector(
            p.grad if p.grad is not None else torch.zeros_like(p) for p in model.parameters())
        return hi - lo, float(loss.detach()) * (hi - lo), gradient.mul_(hi - lo)

    def step(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        clock, step = self.clock, self._steps
        if self.straggler_factor > 1.0:
            clock.add("straggler_delay", 0.0)  # the trainer adds none of its own
        with clock.phase("wait"):
            self._fetch(least=step)
        pushed, first = -1, True
        while True:
            with clock.phase("wait"):
                answer = self._ask(ASK, pushed)
            portion = int(answer[2])
            if portion < 0:
                loss = answer[-1]  # the batch's mean loss, at the parameters fetched
                break
            if first:
                self.fault(step)  # DTBENCH_FAULT: a replica lost mid-batch
                first = False
            samples, summed_loss, gradient = self._portion(inputs, targets, portion)
            with clock.phase("exchange"):
                keep = self._ask(FINISH, portion, samples, alpha=summed_loss)[2] > 0
                pushed = -1
                if keep:
                    for shard, (lo, hi) in zip(self.shards, self.bounds, strict=True):
                        send(self.meter, "control", header(PUSH, step, portion), shard,
                             TAGS.request)
                        send(self.meter, "gradient", gradient[lo:hi].contiguous(), shard,
                             TAGS.gradient)
                    pushed = portion
        self._steps = step + 1
        clock.end_step()
        return torch.tensor(loss if math.isfinite(loss) else math.nan)

    def serve(self, progress: Any = None, total_steps: int = 0) -> None:
        if self.role == "coordinator":
            self.loop.serve(progress, total_steps)
        else:
            self.loop.serve()

    def served_rounds(self) -> float:
        if self.role == "coordinator":
            return float(max(1, self.loop.step))
        return float(max(1, self.loop.gathered))

    def agree_to_stop(self, reached: bool) -> bool:
        """Each replica's own verdict: they evaluate the same parameters on the same data,
        and the serving ranks take part in no collective."""
        return reached

    def model_to_evaluate(self) -> nn.Module:
        """The shards' parameters after every batch this replica took part in."""
        self._fetch(least=self._steps)
        self._evaluated = {"evaluated_version": self.version,
                           "evaluated_checksum": flat_checksum(self._flat)}
        return self.eval_model()

    def eval_model(self) -> nn.Module:
        if self.model is None:
            raise RuntimeError("a coordinator or shard rank has no model to evaluate")
        return self.model

    def state_bytes(self) -> dict[str, int]:
        if self.role == "server":
            x = self.loop.vectors[0]
            return {"parameters": x.numel() * x.element_size(), "gradients": 0,
                    "optimizer": self.loop.vectors.stored}
        if self.role == "coordinator":
            return {"parameters": 0, "gradients": 0, "optimizer": 0}
        return super().state_bytes()

    def step_stats(self) -> dict[str, Any]:
        if self.role == "coordinator":
            return self.loop.summary()
        if self.role == "server":
            return {"shard_checksum": flat_checksum(self.loop.vectors[0]),
                    "duplicate_pushes": self.loop.duplicates, "batches": self.loop.gathered}
        return {"steps": self._steps, "portions_run": self.portions_run,
                **getattr(self, "_evaluated", {})}

    def finish(self) -> None:
        if self.role == "worker" and hasattr(self, "_flat"):
            send(self.meter, "control", header(BYE, self._steps), self.coordinator, TAG_COORD)
