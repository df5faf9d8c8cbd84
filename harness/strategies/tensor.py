"""tensor and dp-tp: tensor parallelism of the fully connected layers
(torch.distributed.tensor.parallel on a DeviceMesh of device type cpu).

tensor: every rank sees the same batch; the FC layers are split Megatron style (colwise,
rowwise, colwise, ...; the last one's output all-gathered into whole logits), the LSTM's
embedding split by vocabulary rows (its output all-reduced); the other layers are replicated
and, seeing the same data and the same dropout masks (one seed per step on every rank),
stay equal without any gradient exchange. Activations move inside the FC layers, nothing
else (harness/strategies/volumes.py: tensor).

dp-tp: Krizhevsky's hybrid (2014) on a dp x tp mesh: each rank runs the convolutions on its
own batch (data parallel over all n ranks), the FC layers are split over the tp ranks of its
group, whose first layer gathers the group's batch (ColwiseParallel(input_layouts=Shard(0)))
and whose last returns whole logits for the group's tp·b samples; the loss is the group's,
with the targets all-gathered (control). Gradients: the convolutions' are summed over all n
ranks and divided by dp (each rank's is 1/tp of its share of the group's loss), the FC
shards' averaged over dp — the same update as ddp with the same global batch.
"""
from __future__ import annotations

import contextlib
import math
from typing import Any, ClassVar

import torch
import torch.distributed as dist
from torch import nn

from harness.core.errors import UsageError
from harness.facts.traffic import sent_bytes
from harness.spec.specs import RunSpec
from harness.strategies import volumes
from harness.strategies.base import (
    STRATEGIES,
    Layers,
    Option,
    Strategy,
    broadcast_from_first,
)

UNSUPPORTED = {
    "tensor": {"resnet50": "resnet50 holds 4% of its parameters in its one FC layer; splitting "
                           "convolutions and batch norm is not implemented"},
    "dp-tp": {"resnet50": "resnet50's one FC layer is not worth a tensor-parallel group "
                          "(batch norm's statistics would also differ from ddp's)",
              "lstm": "dp-tp splits the FC layers after convolutions; for lstm use tensor",
              "gpt": "dp-tp splits the FC layers after convolutions; for gpt use fsdp-tp"},
    "fsdp-tp": {"resnet50": "resnet50 holds 4% of its parameters in its one FC layer: nothing "
                            "worth a tensor-parallel group; use fsdp"},
}


def tp_plan(workload: str, size: str, batch_sharded: bool, layers: Layers = None
            ) -> tuple[dict[str, str], list[volumes.TPLayer]]:
    """Module name -> style ("colwise", "rowwise", "colwise-replicated", "colwise-sharded",
    "embedding"), and the volumes' TPLayers in the same order; of `layers` where given (a
    model that is not a workload keeps no layer replicated)."""
    from workloads import WORKLOADS, get_workload
    from workloads.layers import layer_table

    rows = list(layers) if layers is not None else layer_table(workload, size)
    whole = get_workload(workload).tensor_parallel_replicated if workload in WORKLOADS else ()
    linear = [r for r in rows if r.kind == "Linear"]
    layers = volumes.plan_tp_layers([(r.in_features or 0, r.out_features or 0, r.positions)
                                     for r in linear], batch_sharded_input=batch_sharded)
    styles = {}
    for row, layer in zip(linear, layers, strict=True):
        style = layer.style
        if layer.input_batch_sharded:
            style += "-sharded"
        if layer.output_replicated:
            style += "-replicated"
        styles[row.name] = style
    embeddings = [r for r in rows if r.kind == "Embedding" and r.name not in whole] \
        if not batch_sharded else []
    # An embedding row per token (input_elements tokens a sample, E = outputs per token),
    # split by vocabulary rows: its output all-reduced, no input gradient.
    extra = [volumes.TPLayer(r.parameters * r.input_elements // r.activation_elements,
                             r.activation_elements // r.input_elements, "rowwise",
                             r.input_elements, bias=False, input_requires_grad=False)
             for r in embeddings]
    for r in embeddings:
        styles[r.name] = "embedding"
    return styles, extra + layers


def _tied(model: nn.Module) -> list[list[str]]:
    """Names of each parameter that more than one module holds, first holder first."""
    names: dict[int, list[str]] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(parameter), []).append(name)
    return [found for found in names.values() if len(found) > 1]


def _parallel_style(style: str) -> Any:
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    if style == "embedding":
        return RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate())
    if style == "rowwise":
        return RowwiseParallel()
    kwargs: dict[str, Any] = {}
    if "sharded" in style:
        kwargs["input_layouts"] = Shard(0)
    if "replicated" in style:
        kwargs["output_layouts"] = Replicate()
    return ColwiseParallel(**kwargs)


class _TPBase(Strategy):
    """What tensor and dp-tp share: the split, the kinds, clipping, the report."""

    replicas_agree = False  # the FC layers are shards
    comms = ("gloo", "mpi")
    comm_reason = ("it builds its device mesh and stages on the host; GPU placement and fp16 "
                   "gradient scaling are not implemented for it")
    local_forward = False  # the split layers gather and reduce activations in the forward
    batch_sharded: ClassVar[bool] = False

    @classmethod
    def tp_size(cls, spec: RunSpec) -> int:
        return spec.world_size

    @classmethod
    def check(cls, spec: RunSpec) -> None:
        from workloads import get_workload

        super().check(spec)
        if not spec.distributed:
            raise UsageError(f"strategy {cls.name} needs a process group: --comm gloo or mpi")
        tp = cls.tp_size(spec)
        if tp > 1 and cls.unsupported(spec) is None:
            # A row-wise layer takes the column-wise layer's output shards as its input
            # shards: unless tp divides them, the local shapes differ and its matmul fails
            # mid-run (alexnet tiny at 3 ranks: [8, 513] x [512, 512]).
            _, layers = tp_plan(spec.workload, spec.size, cls.batch_sharded)
            for layer in layers:
                split = layer.in_features
                if layer.style == "rowwise" and layer.input_requires_grad and split % tp:
                    raise UsageError(
                        f"strategy {cls.name} splits {spec.workload} {spec.size}'s layers "
                        f"of {split} features across {tp} ranks, which does not divide them; "
                        "use a tensor-parallel group size that does")
            refusal = get_workload(spec.workload).tensor_parallel_refusal(spec.size, tp)
            if refusal:
                raise UsageError(f"strategy {cls.name}: {refusal}")

    @classmethod
    def unsupported(cls, spec: RunSpec) -> str | None:
        return UNSUPPORTED[cls.name].get(spec.workload)

    @classmethod
    def _clip_control(cls, spec: RunSpec) -> float:
        from workloads import WORKLOADS, get_workload

        clip = spec.workload in WORKLOADS and \
            get_workload(spec.workload).preset(spec.size).extra.get("grad_clip")
        return sent_bytes("allreduce", 4.0, cls.tp_size(spec)) if clip else 0.0

    def _kind(self, kind: str) -> Any:
        return self.meter.kind(kind) if self.meter is not None else contextlib.nullcontext()

    def _parallelize(self, model: nn.Module, mesh: Any) -> nn.Module:
        from torch.distributed.tensor.parallel import parallelize_module

        styles, self.tp_layers = tp_plan(self.spec.workload, self.spec.size, self.batch_sharded)
        self.styles = styles
        # A split layer's output is a view made by DTensor's to_local: an in-place ReLU or
        # dropout after it would break autograd, so the layers beside split ones copy.
        parents = {name.rpartition(".")[0] for name in styles}
        for name, module in model.named_modules():
            if name.rpartition(".")[0] in parents and hasattr(module, "inplace"):
                module.inplace = False
        tied = _tied(model)
        model = parallelize_module(model, mesh, {name: _parallel_style(style)
                                                for name, style in styles.items()})
        # Splitting replaces each module's parameters, so a weight two modules shared (the
        # tied embedding and output projection, split alike by vocabulary rows) is tied again.
        for first, *others in tied:
            shared = model.get_parameter(first)
            for name in others:
                owner, _, attribute = name.rpartition(".")
                setattr(model.get_submodule(owner), attribute, shared)
        return model

    def _build_optimizer(self, model: nn.Module) -> Any:
        kwargs = dict(self.recipe.optimizer_kwargs)
        kwargs.setdefault("foreach", False)  # DTensor shards beside plain tensors
        return self.recipe.optimizer_class(model.parameters(), **kwargs)

    def _clip(self, group: Any) -> None:
        """Clip by the whole model's gradient norm: replicated gradients counted once, the
        shards' squared norms summed over the tp group (control)."""
        max_norm = self.recipe.grad_clip
        if not max_norm:
            return
        assert self.model is not None
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        replicated = torch.zeros((), dtype=torch.float32)
        sharded = torch.zeros((), dtype=torch.float32)
        for g in grads:
            if hasattr(g, "to_local"):
                sharded += g.to_local().detach().float().pow(2).sum()
            else:
                replicated += g.detach().float().pow(2).sum()
        with self._kind("control"):
            dist.all_reduce(sharded, group=group)
        factor = max_norm / (math.sqrt(float(replicated + sharded)) + 1e-6)
        if factor < 1.0:
            for g in grads:
                (g.to_local() if hasattr(g, "to_local") else g).mul_(factor)

    def step_stats(self) -> dict[str, Any]:
        return {"tp": self.tp_size(self.spec), "split_layers": self.styles,
                "split_parameters": sum(layer.parameters for layer in self.tp_layers)}


@STRATEGIES.register("tensor")
class Tensor(_TPBase):
    """Tensor parallel FC layers over all ranks, one batch."""

    name = "tensor"
    step_model = "harness.predict.modelparallel:tensor"
    summary = "tensor parallel FC layers (colwise/rowwise) over all ranks, one shared batch"
    family = "model parallel"
    engine = "torch.distributed.tensor.parallel (ColwiseParallel/RowwiseParallel)"
    own_work = "DTensor's dispatch in the split layers"

    @classmethod
    def replicas(cls, spec: RunSpec) -> int:
        return 1

    @classmethod
    def loss_ranks(cls, spec: RunSpec) -> list[int]:
        return [0]

    @classmethod
    def traffic(cls, spec: RunSpec, param_bytes: float, layers: Layers = None
                ) -> dict[str, float]:
        _, split = tp_plan(spec.workload, spec.size, False, layers)
        found = volumes.tensor(param_bytes, spec.world_size, layers=split,
                               batch=spec.batch_per_rank, backend=spec.comm,
                               element_bytes=volumes.activation_bytes(spec.precision))
        found["control"] += cls._clip_control(spec)
        return found

    def data_shard(self) -> tuple[int, int]:
        return 0, 1

    def setup(self) -> None:
        from torch.distributed.device_mesh import init_device_mesh

        model = self.recipe.build_model()
        broadcast_from_first(model)
        self.mesh = init_device_mesh(self.place.device.type, (self.spec.world_size,))
        self.model = self._parallelize(model, self.mesh)
        self.optimizer = self._build_optimizer(self.model)
        self.steps_done = 0

    def step(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        recipe, clock, model = self.recipe, self.clock, self.model
        assert model is not None
        # The same dropout masks on every rank: the replicated layers must stay equal.
        torch.manual_seed(self.spec.seed * 1_000_003 + self.steps_done)
        self.steps_done += 1
        self.optimizer.zero_grad(set_to_none=True)
        with self._kind("activation"):
            with clock.phase("forward"), recipe.autocast():
                loss = recipe.loss(model(inputs), targets)
            with clock.phase("backward"):
                loss.backward()
        with clock.phase("optimizer"):
            self._clip(self.mesh.get_group())
            self.optimizer.step()
        clock.end_step()
        return loss.detach()


@STRATEGIES.register("dp-tp")
class DPTP(_TPBase):
    """Krizhevsky's hybrid: convolutions data parallel, FC layers tensor parallel."""

    name = "dp-tp"
    step_model = "harness.predict.modelparallel:dp_tp"
    summary = "Krizhevsky's hybrid: convolutions data parallel, FC layers tensor parallel (2-D)"
    family = "hybrid"
    engine = "2-D DeviceMesh (dp x tp) + torch.distributed.tensor.parallel"
    options: ClassVar[tuple[Option, ...]] = (
        Option("tp", int, 2, "ranks of a tensor-parallel group (the model-parallel dimension)",
               minimum=1),
    )
    batch_sharded = True

    @classmethod
    def tp_size(cls, spec: RunSpec) -> int:
        return int(cls.option_value(spec, "tp"))

    @classmethod
    def check(cls, spec: RunSpec) -> None:
        super().check(spec)
        tp = cls.tp_size(spec)
        if spec.world_size % tp:
            raise UsageError(f"--strategy-opt tp={tp} does not divide the {spec.world_size} "
                             "ranks (dp-tp needs a dp x tp mesh)")

    @classmethod
    def traffic(cls, spec: RunSpec, param_bytes: float, layers: Layers = None
                ) -> dict[str, float]:
        tp = cls.tp_size(spec)
        _, split = tp_plan(spec.workload, spec.size, True, layers)
        found = volumes.dp_tp(param_bytes, spec.world_size, tp=tp, layers=split,
                              batch_per_rank=spec.batch_per_rank, backend=spec.comm,
                              element_bytes=volumes.activation_bytes(spec.precision))
        found["control"] += sent_bytes("allgather", 8.0 * tp * spec.batch_per_rank, tp)
        return found

    def setup(self) -> None:
        from torch.distributed.device_mesh import init_device_mesh

        tp = self.tp_size(self.spec)
        self.dp = self.spec.world_size // tp
        model = self.recipe.build_model()
        broadcast_from_first(model)
        self.mesh = init_device_mesh(self.place.device.type, (self.dp, tp),
                                     mesh_dim_names=("dp", "tp"))
        self.tp_group, self.dp_group = self.mesh.get_group("tp"), self.mesh.get_group("dp")
        self.tp_rank = dist.get_rank(self.tp_group)
        self.model = self._parallelize(model, self.mesh["tp"])
        self.optimizer = self._build_optimizer(self.model)

    def step(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        recipe, clock, model = self.recipe, self.clock, self.model
        assert model is not None
        tp = self.tp_size(self.spec)
        self.optimizer.zero_grad(set_to_none=True)
        with self._kind("activation"):
            with clock.phase("forward"), recipe.autocast():
                logits = model(inputs)
                with self._kind("control"):
                    group_targets = [torch.empty_like(targets) for _ in range(tp)]
                    dist.all_gather(group_targets, targets.contiguous(), group=self.tp_group)
                loss = recipe.loss(logits, torch.cat(group_targets))
            with clock.phase("backward"):
                loss.backward()
        with clock.phase("exchange"), self._kind("gradient"):
            self._exchange()
        with clock.phase("optimizer"):
            self._clip(self.tp_group)
            self.optimizer.step()
        clock.end_step()
        return loss.detach()

    def _exchange(self) -> None:
        """Dense gradients: SUM over all ranks / dp; FC shards: mean over dp."""
        assert self.model is not None
        dense, shards = [], []
        for p in self.model.parameters():
            if p.grad is None:
                continue
            (shards if hasattr(p.grad, "to_local") else dense).append(p.grad)
        _reduce(dense, None, 1.0 / self.dp)
        if self.dp > 1:
            _reduce([g.to_local() for g in shards], self.dp_group, 1.0 / self.dp)

    def eval_model(self) -> nn.Module:
        assert self.model is not None
        return _OwnRows(self.model, self.tp_rank)


def _reduce(grads: list[torch.Tensor], group: Any, scale: float) -> None:
    """All-reduce (SUM) the gradients as one flat tensor, then scale them."""
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, group=group)
    flat.mul_(scale)
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()


class _OwnRows(nn.Module):
    """dp-tp's model for evaluation: every rank of a tp group evaluates the same batch, the
    split layers gather tp copies of it; the rows of this rank's copy are its logits."""

    def __init__(self, model: nn.Module, tp_rank: int) -> None:
        super().__init__()
        self.model = model
        self.tp_rank = tp_rank

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        logits = self.model(inputs)
        rows = inputs.shape[0]
        return logits[self.tp_rank * rows:(self.tp_rank + 1) * rows]
