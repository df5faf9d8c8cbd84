"""hogwild: HOGWILD! (Niu et al. 2011): the ranks of one node update one model in shared
memory without locks, each on its own data and with its own optimizer state (the pattern of
PyTorch's Hogwild example, `share_memory()`).

The ranks are separate processes started by the local launcher rather than forks of one, so
the shared model is a file in /dev/shm that every rank maps (torch.from_file, shared=True):
the same memory, no copies and no messages; the process group only orders set-up and end.
"""
from __future__ import annotations

import atexit
import contextlib
import os
from pathlib import Path
from typing import ClassVar

import torch
import torch.distributed as dist

from harness.core.errors import UsageError
from harness.spec.specs import RunSpec
from harness.strategies import volumes
from harness.strategies.base import STRATEGIES, Layers, Strategy
from harness.strategies.steps import data_parallel_step

SHARED_DIR = Path("/dev/shm")


def shared_path(key: str) -> Path:
    return (SHARED_DIR if SHARED_DIR.is_dir() else Path("/tmp")) / f"dtbench-hogwild-{key}"


@STRATEGIES.register("hogwild")
class Hogwild(Strategy):
    """Lock-free updates of one model in shared memory, one node."""

    name = "hogwild"
    step_model = "harness.predict.dataparallel:hogwild"
    summary = "HOGWILD!: ranks of one node update one shared-memory model without locks"
    family = "shared memory, asynchronous"
    engine = "torch.from_file(shared=True) mapped by every rank (share_memory across processes)"
    replicas_agree = False  # one model, not replicas
    synchronous = False
    # Its forward pass reads weights that the other ranks write meanwhile: not a clean
    # measure of compute beside the single-rank run's.
    local_forward = False
    comms: ClassVar[tuple[str, ...]] = ("gloo",)
    comm_reason: ClassVar[str] = ("its workers update one model in the shared memory of one "
                                  "host; gloo only carries the evaluation's exchange")
    launchers: ClassVar[tuple[str, ...]] = ("local",)

    @classmethod
    def check(cls, spec: RunSpec) -> None:
        if spec.nnodes > 1:
            raise UsageError("strategy hogwild shares memory between the ranks of one node: "
                             f"--nnodes {spec.nnodes} is not possible")
        if spec.launcher != "local":
            raise UsageError(f"strategy hogwild needs its ranks on this node from dtbench's "
                             f"local launcher, not --launcher {spec.launcher}")
        if spec.backend != "cpu":
            raise UsageError(f"strategy hogwild runs on --backend cpu: {cls.comm_reason}")
        super().check(spec)

    @classmethod
    def traffic(cls, spec: RunSpec, param_bytes: float, layers: Layers = None
                ) -> dict[str, float]:
        return volumes.hogwild(param_bytes, spec.world_size)

    def setup(self) -> None:
        model = self.recipe.build_model().to(memory_format=torch.contiguous_format)
        parameters = list(model.parameters())
        total = sum(p.numel() for p in parameters)
        self._path: Path | None = None
        if self.spec.distributed:
            key = os.environ.get("DTBENCH_RUN_ID") or os.environ.get("MASTER_PORT", "0")
            path = shared_path(f"{key}-{self.spec.seed}")
            if self.place.rank == 0:
                with open(path, "wb") as handle:
                    handle.truncate(total * 4)
                atexit.register(_unlink, path)
                self._path = path
            dist.barrier()
            shared = torch.from_file(str(path), shared=True, size=total, dtype=torch.float32)
            offset = 0
            with torch.no_grad():
                for parameter in parameters:
                    count = parameter.numel()
                    view = shared[offset:offset + count].view_as(parameter)
                    if self.place.rank == 0:
                        view.copy_(parameter)
                    parameter.data = view
                    offset += count
            dist.barrier()  # every rank sees rank 0's initial values
        self.model = model
        self.optimizer = self.recipe.build_optimizer(model.parameters())

    def step(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return data_parallel_step(self, inputs, targets)

    def model_to_evaluate(self) -> torch.nn.Module:
        """The shared model once every rank has finished the steps counted so far: without
        the barrier the other ranks' updates land in the weights while rank 0 evaluates
        them. Every rank evaluates after the same number of steps (equal shards), and no rank
        writes again before rank 0's verdict (agree_to_stop's broadcast), so rank 0 reads a
        model that holds exactly the counted updates."""
        if self.spec.distributed:
            dist.barrier()
        assert self.model is not None
        with torch.no_grad():
            checksum = float(sum(p.detach().double().sum() for p in self.model.parameters()))
        self._evaluated = {"evaluated_checksum": checksum}
        return self.model

    def step_stats(self) -> dict[str, object]:
        return dict(getattr(self, "_evaluated", {}))

    def state_bytes(self) -> dict[str, int]:
        found = super().state_bytes()
        # The parameters are one copy in shared memory: rank 0 holds them, the rest map them.
        if self.place.rank != 0 and self.spec.distributed:
            found["parameters"] = 0
        return found

    def finish(self) -> None:
        if self.spec.distributed:
            dist.barrier()  # nobody still steps on the shared model
        if self._path is not None:
            _unlink(self._path)


def _unlink(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()
