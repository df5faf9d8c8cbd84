"""fsdp-tp: FSDP2 across the data-parallel dimension and tensor parallelism inside it, on a
2-D DeviceMesh (dp x tp), as TorchTitan composes them.

The tp ranks of a group share one batch (the data shard of their dp index) and split the
fully connected layers Megatron style (tensor.py's plan: a transformer's attention and MLP
column- then row-wise, its vocabulary rows); their activations move inside the group. Over
the dp dimension every rank's parameters — its tensor-parallel shards and the replicated
rest — are sharded by FSDP2 (`fully_shard` per block on the mesh's dp dimension): gathered
for the forward pass and again for the backward, gradients reduce-scattered. At the same
data-parallel degree and global batch it trains the model ddp trains.
"""
from __future__ import annotations

import math
import warnings
from functools import lru_cache
from typing import Any, ClassVar

import torch
from torch import nn

from harness.core.errors import UsageError
from harness.spec.specs import RunSpec
from harness.strategies import volumes
from harness.strategies.base import STRATEGIES, Layers, Option, broadcast_from_first
from harness.strategies.fsdp import RESHARD, shard_units
from harness.strategies.tensor import _TPBase, tp_plan

TP = Option("tp", int, 2, "ranks of a tensor-parallel group (the model-parallel dimension)",
            minimum=1)
REPLICATED_BIAS = ("rowwise", "embedding")  # styles whose bias (if any) is not split


@lru_cache(maxsize=32)
def local_parameters(workload: str, size: str, tp: int) -> tuple[float, float]:
    """(parameters one rank of a tp group holds before FSDP shards them, of which in FSDP's
    root unit): the split layers' weights (and column-wise biases) at 1/tp, the rest whole;
    the mean over the group where a split is uneven."""
    from workloads import get_workload

    styles, _ = tp_plan(workload, size, False)
    with torch.device("meta"):
        model = get_workload(workload).build_model(size)
    split = set()
    for name, style in styles.items():
        for key, parameter in model.get_submodule(name).named_parameters(recurse=False):
            if not (key == "bias" and style.split("-")[0] in REPLICATED_BIAS):
                split.add(id(parameter))

    def local(parameters: list[nn.Parameter]) -> float:
        return sum(p.numel() / tp if id(p) in split else p.numel() for p in parameters)

    sharded = {id(p) for unit in shard_units(model) for p in unit.parameters()}
    everything = list(model.parameters())
    return local(everything), local([p for p in everything if id(p) not in sharded])


def held_parameters(workload: str, size: str, tp: int, layers: Layers = None
                    ) -> tuple[float, float]:
    """local_parameters of a workload; of a model read for its facts only (`layers`, a
    torchvision model's), its split layers at 1/tp, the rest whole, and no tied weight."""
    from workloads import WORKLOADS

    if workload in WORKLOADS:
        return local_parameters(workload, size, tp)
    _, split = tp_plan(workload, size, False, layers)
    total = sum(layer.parameters for layer in layers or ())
    return total - sum(layer.parameters for layer in split) * (1 - 1 / tp), 0.0


@STRATEGIES.register("fsdp-tp")
class FSDPTP(_TPBase):
    """2-D: FSDP2 over dp, tensor parallelism over tp (TorchTitan's composition)."""

    name = "fsdp-tp"
    step_model = "harness.predict.modelparallel:fsdp_tp"
    summary = "2-D mesh: FSDP2 across data-parallel ranks, tensor parallel layers inside"
    family = "hybrid: data parallel x tensor parallel"
    engine = ("2-D DeviceMesh (dp x tp): torch.distributed.fsdp.fully_shard over dp + "
              "torch.distributed.tensor.parallel over tp")
    options: ClassVar[tuple[Option, ...]] = (TP, RESHARD)

    @classmethod
    def tp_size(cls, spec: RunSpec) -> int:
        return int(cls.option_value(spec, "tp"))

    @classmethod
    def check(cls, spec: RunSpec) -> None:
        super(_TPBase, cls).check(spec)  # comm and launcher first, as every strategy's
        tp = cls.tp_size(spec)
        if spec.world_size % tp:
            raise UsageError(f"--strategy-opt tp={tp} does not divide the {spec.world_size} "
                             "ranks (fsdp-tp needs a dp x tp mesh)")
        super().check(spec)

    @classmethod
    def replicas(cls, spec: RunSpec) -> int:
        return spec.world_size // cls.tp_size(spec)

    @classmethod
    def loss_ranks(cls, spec: RunSpec) -> list[int]:
        return list(range(0, spec.world_size, cls.tp_size(spec)))

    @classmethod
    def traffic(cls, spec: RunSpec, param_bytes: float, layers: Layers = None
                ) -> dict[str, float]:
        tp = cls.tp_size(spec)
        _, split = tp_plan(spec.workload, spec.size, False, layers)
        local, root = held_parameters(spec.workload, spec.size, tp, layers)
        return volumes.fsdp_tp(param_bytes, spec.world_size, tp=tp, layers=split,
                               batch_per_rank=spec.batch_per_rank,
                               local_bytes=volumes.PARAM_BYTES * local,
                               root_bytes=volumes.PARAM_BYTES * root, backend=spec.comm,
                               reshard_after_forward=bool(
                                   cls.option_value(spec, "reshard_after_forward")),
                               element_bytes=volumes.activation_bytes(spec.precision))

    def data_shard(self) -> tuple[int, int]:
        tp = self.tp_size(self.spec)
        return self.place.rank // tp, self.spec.world_size // tp

    def setup(self) -> None:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        tp = self.tp_size(self.spec)
        self.dp = self.spec.world_size // tp
        model = self.recipe.build_model(compiled=False)
        model = model.to(memory_format=torch.contiguous_format)  # FSDP2 shards contiguous
        broadcast_from_first(model)
        self.mesh = init_device_mesh(self.place.device.type, (self.dp, tp),
                                     mesh_dim_names=("dp", "tp"))
        if self.meter is not None and tp > 1:
            # the tensor-parallel group carries activations; the dp group FSDP2's gathers
            # (parameters) and reduce-scatters (gradients)
            self.meter.label_group(self.mesh.get_group("tp"), "activation")
        self.styles: dict[str, str] = {}
        self.tp_layers: list[volumes.TPLayer] = []
        if tp > 1:
            model = self._parallelize(model, self.mesh["tp"])
        reshard = bool(self.option_value(self.spec, "reshard_after_forward"))
        for unit in list(shard_units(model)):
            fully_shard(unit, mesh=self.mesh["dp"], reshard_after_forward=reshard)
        fully_shard(model, mesh=self.mesh["dp"])
        warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\.distributed")
        # The root's output is the split head's gathered logits, a view; nothing writes it.
        warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view")
        self.model = model
        self.optimizer = self._build_optimizer(model)
        self.steps_done = 0

    def step(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        recipe, clock, model = self.recipe, self.clock, self.model
        assert model is not None
        # Dropout: the same masks inside a tp group (its replicated activations must agree),
        # others across dp ranks, which read other data.
        torch.manual_seed((self.spec.seed * 1_000_003 + self.steps_done) * self.dp
                          + self.place.rank // self.tp_size(self.spec))
        self.steps_done += 1
        self.optimizer.zero_grad(set_to_none=True)
        with clock.phase("forward"), recipe.autocast():
            loss = recipe.loss(model(inputs), targets)
        with clock.phase("backward"):
            loss.backward()  # FSDP2 reduce-scatters over dp inside
        self.straggle()
        with clock.phase("optimizer"):
            self._clip_norm()
            self.optimizer.step()
        clock.end_step()
        return loss.detach()

    def _clip_norm(self) -> None:
        """Clip by the whole model's gradient norm: each rank's squared local shards, weighted
        by the share of the world holding that shard, summed over all ranks (control) —
        clip_grad_norm_ cannot mix DTensors of the 2-D mesh with those of its dp dimension."""
        max_norm = self.recipe.grad_clip
        if not max_norm:
            return
        import torch.distributed as dist

        assert self.model is not None
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        world = self.spec.world_size
        squared = torch.zeros((), dtype=torch.float32, device=self.place.device)
        for grad in grads:
            shards = math.prod(grad.device_mesh.size(dim) for dim, placement
                               in enumerate(grad.placements) if placement.is_shard())
            squared += grad.to_local().detach().float().pow(2).sum() * shards / world
        with self._kind("control"):
            dist.all_reduce(squared)
        factor = max_norm / (math.sqrt(float(squared)) + 1e-6)
        if factor < 1.0:
            for grad in grads:
                grad.to_local().mul_(factor)

    def full_parameters(self) -> list[torch.Tensor]:
        """Every parameter whole (gathered over both mesh dimensions): for equivalence
        checks."""
        assert self.model is not None
        return [p.full_tensor() for p in self.model.parameters()]

    def step_stats(self) -> dict[str, Any]:
        return {**super().step_stats(), "dp": self.dp}
