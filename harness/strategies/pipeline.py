"""pipeline: model parallelism by stages (torch.distributed.pipelining): the model is cut into
S stages balanced by counted FLOPs (harness/strategies/pipeline_stages.py), stage k on rank k mod p;
each step's batch is split into M microbatches that flow through the stages under a GPipe,
1F1B or interleaved 1F1B schedule; activations go forward and their gradients back between
ranks (point to point). With more ranks than p, R = n/p pipelines are data-parallel replicas
whose stages allreduce their gradients.

Every rank of a pipeline reads the same batch (data_shard: the pipeline's index): the first
stage uses the inputs, the last the targets. Only the last stage computes the loss: it is
broadcast over the pipeline (control) so every rank returns it. With gradient clipping the
global norm is the allreduced sum of the stages' squared norms (control).
"""
from __future__ import annotations

import math
import time
from typing import Any, ClassVar

import torch
import torch.distributed as dist
from torch import nn

from harness.core.errors import UsageError
from harness.spec.specs import RunSpec
from harness.strategies import pipeline_stages, volumes
from harness.strategies.base import STRATEGIES, Layers, Option, Strategy, tensor_bytes
from harness.strategies.pipeline_stages import SCHEDULES, layout, plan_cut, theoretical_bubble

SCHEDULE_CLASSES = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B",
                    "interleaved-1f1b": "ScheduleInterleaved1F1B"}


@STRATEGIES.register("pipeline")
class Pipeline(Strategy):
    """Model parallel by stages, M microbatches per step."""

    name = "pipeline"
    step_model = "harness.predict.modelparallel:pipeline"
    summary = "pipeline stages balanced by FLOPs; GPipe / 1F1B / interleaved 1F1B, M microbatches"
    family = "model parallel"
    engine = "torch.distributed.pipelining (PipelineStage + Schedule*)"
    options: ClassVar[tuple[Option, ...]] = (
        Option("schedule", str, "gpipe", "microbatch schedule", choices=SCHEDULES),
        Option("microbatches", int, 4, "microbatches per step (M)", minimum=1,
               aliases=("M",)),
        Option("stages", int, 0, "pipeline stages (0: one per rank, two for "
               "interleaved-1f1b)", minimum=0),
        Option("chunks", int, 0, "stages per rank (v; 0: two for interleaved-1f1b, else one) "
               "at every node count predicted", minimum=0, aliases=("v",),
               assumption="a run places its stages by `schedule` and `stages`"),
    )
    replicas_agree = False  # each rank holds its stage(s) only
    local_forward = False  # a stage waits for the previous stage's activations
    comms = ("gloo", "mpi")
    comm_reason = ("it builds its device mesh and stages on the host; GPU placement and fp16 "
                   "gradient scaling are not implemented for it")

    # ---------------------------------------------------------------- planning side
    @classmethod
    def _layout(cls, spec: RunSpec) -> pipeline_stages.Layout:
        chunks = cls.option_value(spec, "chunks")  # predict's assumption: v stages a rank
        if chunks and not cls.option_value(spec, "stages"):
            return pipeline_stages.Layout(chunks * spec.world_size, chunks, spec.world_size, 1)
        return layout(spec, cls.option_value(spec, "schedule"), cls.option_value(spec, "stages"))

    @classmethod
    def check(cls, spec: RunSpec) -> None:
        super().check(spec)
        if not spec.distributed:
            raise UsageError("strategy pipeline needs a process group: --comm gloo or mpi")
        lay = cls._layout(spec)
        plan_cut(spec.workload, spec.size, lay.stages)
        pipeline_stages.check_microbatches(spec, cls.option_value(spec, "schedule"),
                                   cls.option_value(spec, "microbatches"), lay)

    @classmethod
    def replicas(cls, spec: RunSpec) -> int:
        return cls._layout(spec).replicas

    @classmethod
    def loss_ranks(cls, spec: RunSpec) -> list[int]:
        lay = cls._layout(spec)
        return list(range(0, spec.world_size, lay.ranks))

    @classmethod
    def roles(cls, spec: RunSpec) -> list[str]:
        lay = cls._layout(spec)
        return ["stage" + "+".join(str(k) for k in range(r % lay.ranks, lay.stages, lay.ranks))
                for r in range(spec.world_size)]

    @classmethod
    def traffic(cls, spec: RunSpec, param_bytes: float, layers: Layers = None
                ) -> dict[str, float]:
        """Activations and their gradients across every cut between ranks at the run's
        precision (volumes.pipeline, per pipeline of p ranks), the loss broadcast (4 bytes)
        and, with clipping, the squared norm's allreduce (control); with R replicas, each
        stage's gradients allreduced over R (gradient, the mean over stages: 2(R-1)/R · P/p).
        A model that is not a workload (`layers` given) has no tied weight and no clipping."""
        from harness.facts.traffic import mean_sent_bytes, sent_bytes
        from workloads import WORKLOADS, get_workload

        lay = cls._layout(spec)
        cut = plan_cut(spec.workload, spec.size, lay.stages, layers)
        element = volumes.activation_bytes(spec.precision)
        found = volumes.pipeline(param_bytes, lay.ranks, cut_bytes=[element * e for e in
                                                                     cut.cut_elements],
                                 batch=spec.batch_per_rank, chunks=lay.chunks,
                                 microbatches=cls.option_value(spec, "microbatches"))
        workload = get_workload(spec.workload) if spec.workload in WORKLOADS else None
        control = mean_sent_bytes("broadcast", 4.0, lay.ranks)
        if workload is not None and workload.preset(spec.size).extra.get("grad_clip"):
            control += sent_bytes("allreduce", 4.0, lay.ranks)
        found["control"] += control
        found["gradient"] += sent_bytes("allreduce", param_bytes / lay.ranks, lay.replicas)
        for tie in pipeline_stages.ties(spec.workload, spec.size, cut) if workload else ():
            ranks = {lay.stage_rank(k) for k in tie.stages}
            if len(ranks) > 1:  # its ranks sum its gradient; the mean over the pipeline's
                found["gradient"] += len(ranks) * sent_bytes(
                    "allreduce", volumes.PARAM_BYTES * tie.elements, len(ranks)) / lay.ranks
        return found

    # ---------------------------------------------------------------- rank side
    def setup(self) -> None:
        from torch.distributed import pipelining

        spec, rank = self.spec, self.place.rank
        self.layout = lay = self._layout(spec)
        self.schedule_name = self.option_value(spec, "schedule")
        self.micro = self.option_value(spec, "microbatches")
        self.cut = plan_cut(spec.workload, spec.size, lay.stages)
        self.replica, self.pipe_rank = divmod(rank, lay.ranks)
        # Every rank makes every group, in the same order (torch's rule for new_group).
        pipes = [dist.new_group(list(range(r * lay.ranks, (r + 1) * lay.ranks)))
                 for r in range(lay.replicas)]
        peers = ([dist.new_group([j + r * lay.ranks for r in range(lay.replicas)])
                  for j in range(lay.ranks)] if lay.replicas > 1 else [None] * lay.ranks)
        self.pipe_group, self.peer_group = pipes[self.replica], peers[self.pipe_rank]
        model = self.recipe.build_model()  # seeded alike on every rank: stages start alike
        pieces = pipeline_stages.split_model(model, self.cut)
        self.own = [k for k in range(lay.stages) if lay.stage_rank(k) == self.pipe_rank]
        self.tied = self._tie_groups(model, lay)
        modules = [pieces[k] for k in self.own]
        del model, pieces
        self.model = nn.ModuleList(modules)
        owned = list(self.model.parameters())
        # A rank whose stages hold only parameter-free layers (pooling, flatten: FLOP
        # balancing can give a deep pipeline such a stage) has nothing to update.
        self.optimizer = self.recipe.build_optimizer(owned) if owned else None
        self.stages = [pipelining.PipelineStage(m, k, lay.stages, self.place.device,
                                                group=self.pipe_group)
                       for k, m in zip(self.own, modules, strict=True)]
        for stage in self.stages:
            self._time(stage, "forward_one_chunk", "forward")
            self._time(stage, "backward_one_chunk", "backward")
        schedule = getattr(pipelining, SCHEDULE_CLASSES[self.schedule_name])
        target = self.stages if self.schedule_name == "interleaved-1f1b" else self.stages[0]
        self.schedule = schedule(target, n_microbatches=self.micro, loss_fn=self.recipe.loss,
                                 scale_grads=True)
        self.first = 0 in self.own
        self.last = lay.stages - 1 in self.own
        self.last_rank = dist.get_global_rank(self.pipe_group, lay.stage_rank(lay.stages - 1))
        self.busy: list[float] = []
        self.spans: list[float] = []
        self._whole: nn.Module | None = None

    def _tie_groups(self, model: nn.Module, lay: pipeline_stages.Layout) -> list[tuple[Any, Any]]:
        """(group, this rank's copy) of each tied weight whose stages sit on several ranks of
        a pipeline: one group per tie and pipeline, made by every rank in the same order."""
        mine = []
        for tie in pipeline_stages.ties(self.spec.workload, self.spec.size, self.cut):
            ranks = sorted({lay.stage_rank(k) for k in tie.stages})
            if len(ranks) < 2:
                continue  # one rank holds every copy: autograd sums its gradient already
            for replica in range(lay.replicas):
                group = dist.new_group([replica * lay.ranks + r for r in ranks])
                if replica == self.replica and self.pipe_rank in ranks:
                    mine.append((group, model.get_parameter(tie.names[0])))
        return mine

    def _time(self, stage: Any, method: str, phase: str) -> None:
        """Time a stage's compute (forward/backward of one microbatch) into the phase clock;
        the rest of the schedule's time is waiting for neighbours (the bubble)."""
        inner = getattr(stage, method)

        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.clock.phase(phase):
                return inner(*args, **kwargs)

        setattr(stage, method, timed)

    def data_shard(self) -> tuple[int, int]:
        lay = self._layout(self.spec)
        return self.place.rank // lay.ranks, lay.replicas

    def _kind(self, kind: str) -> Any:
        import contextlib

        return self.meter.kind(kind) if self.meter is not None else contextlib.nullcontext()

    def step(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        recipe, clock = self.recipe, self.clock
        if self.optimizer is not None:
            self.optimizer.zero_grad(set_to_none=True)
        losses: list[torch.Tensor] = []
        args = (inputs,) if self.first else ()
        kwargs: dict[str, Any] = {"target": targets, "losses": losses} if self.last else {}
        before = clock.so_far("forward", "backward")
        started = time.perf_counter()
        with self._kind("activation"), recipe.autocast():
            self.schedule.step(*args, **kwargs)
        span = time.perf_counter() - started
        busy = clock.so_far("forward", "backward") - before
        self.spans.append(span)
        self.busy.append(busy)
        clock.add("wait", max(0.0, span - busy))
        with clock.phase("exchange"):
            if self.peer_group is not None:
                with self._kind("gradient"):
                    self._average_gradients()
            with self._kind("gradient"):
                for group, weight in self.tied:
                    dist.all_reduce(weight.grad, group=group)
            loss = (torch.stack([x.detach().float() for x in losses]).mean() if self.last
                    else torch.zeros((), dtype=torch.float32))
            with self._kind("control"):
                dist.broadcast(loss, src=self.last_rank, group=self.pipe_group)
                self._clip()
        with clock.phase("optimizer"):
            if self.optimizer is not None:
                self.optimizer.step()
        clock.end_step()
        return loss

    def _average_gradients(self) -> None:
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        if not grads:
            return
        flat = torch.cat([g.flatten() for g in grads])
        dist.all_reduce(flat, group=self.peer_group)
        flat /= self.layout.replicas
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()

    def _clip(self) -> None:
        """Clip by the norm of the whole model's gradient: the stages' squared norms summed
        over the pipeline (what clip_grad_norm_ computes on one rank)."""
        max_norm = self.recipe.grad_clip
        if not max_norm:
            return
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        squared = torch.zeros((), dtype=torch.float32)
        for g in grads:
            squared += g.detach().float().pow(2).sum()
        dist.all_reduce(squared, group=self.pipe_group)
        factor = max_norm / (math.sqrt(float(squared)) + 1e-6)
        if factor < 1.0:
            for g in grads:
                g.mul_(factor)

    # ---------------------------------------------------------------- what it reports
    def state_bytes(self) -> dict[str, int]:
        assert self.model is not None
        return tensor_bytes(self.model, self.optimizer)

    def step_stats(self) -> dict[str, Any]:
        measured = list(zip(self.busy, self.spans, strict=True))[1:] or list(
            zip(self.busy, self.spans, strict=True))
        idle = [1.0 - busy / span for busy, span in measured if span > 0]
        lay = self.layout
        return {"schedule": self.schedule_name, "microbatches": self.micro,
                "stages": lay.stages, "ranks_per_pipeline": lay.ranks,
                "pipelines": lay.replicas, "own_stages": self.own,
                "cut": self.cut.as_dict(),
                "cut_rule": "blocks (workloads.layers.block_table) balanced by forward + "
                            "backward FLOPs per sample (balance_stages)",
                "bubble_fraction": sum(idle) / len(idle) if idle else None,
                "bubble_fraction_theory": theoretical_bubble(lay.ranks, self.micro,
                                                             lay.chunks),
                "bubble_measured_as": "1 - (stage forward + backward time) / schedule time, "
                                      "mean over steps after the first",
                "stage_state_bytes": sum(self.state_bytes().values())}

    def eval_model(self) -> nn.Module:
        """The whole model, gathered from the stages when evaluation starts (eval())."""
        if self._whole is None:
            self._whole = _Gathered(self)
        return self._whole

    def full_model(self) -> nn.Module:
        """The whole model as trained so far (gathered on every rank: call on all)."""
        gathered = self.eval_model()
        gathered.eval()
        gathered.train()
        return gathered.whole  # type: ignore[return-value]

    def gather(self, whole: nn.Module) -> None:
        """Copy every stage's parameters and buffers into `whole`, broadcast by the rank that
        holds the stage (outside any step: the meter files these bytes apart)."""
        lay = self.layout
        pieces = pipeline_stages.split_model(whole, self.cut)
        mine = {k: m for k, m in zip(self.own, self.model, strict=True)}
        for k, piece in enumerate(pieces):
            source = mine.get(k, piece)
            owner = dist.get_global_rank(self.pipe_group, lay.stage_rank(k))
            ours = dict(piece.state_dict(keep_vars=True))
            for name, value in source.state_dict(keep_vars=True).items():
                data = value.detach().clone() if k in mine else ours[name].detach()
                dist.broadcast(data, src=owner, group=self.pipe_group)
                ours[name].data.copy_(data)
        if self.meter is not None:
            self.meter.discard("model gathered from the stages")


class _Gathered(nn.Module):
    """The whole model for evaluation: built once, refreshed from the stages on eval()."""

    def __init__(self, strategy: Pipeline) -> None:
        super().__init__()
        self._strategy = [strategy]  # not a submodule
        self.whole = strategy.recipe.build_model()

    def train(self, mode: bool = True) -> _Gathered:
        if not mode:
            self._strategy[0].gather(self.whole)
        return super().train(mode)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.whole(inputs)
