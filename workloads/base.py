"""What a workload is: model, data, loss, optimizer and quality target, per size preset."""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn

from harness.core.errors import UsageError
from harness.core.registry import Registry
from workloads.flops import count_flops_per_sample, count_parameters


@dataclass(frozen=True)
class QualityTarget:
    """The quality a time-to-train run must reach, and the budget it gets to reach it."""

    metric: str
    value: float
    higher_is_better: bool
    max_epochs: int
    eval_every_epochs: int = 1

    def reached(self, quality: float) -> bool:
        if math.isnan(quality):
            return False
        return quality >= self.value if self.higher_is_better else quality <= self.value


@dataclass(frozen=True)
class Preset:
    """One size of a workload: model arguments, input shape, default batch and step counts."""

    model_kwargs: dict[str, Any]
    input_shape: tuple[int, ...]
    num_classes: int
    batch_size: dict[str, int]
    steps: int
    warmup: int
    target: QualityTarget
    lr: float
    data: str
    notes: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def default_batch(self, backend: str) -> int:
        return self.batch_size.get(backend, self.batch_size["cpu"])


@dataclass
class Dataset:
    """An in-memory split: inputs and targets as tensors with the sample dimension first."""

    inputs: torch.Tensor
    targets: torch.Tensor
    description: str = ""

    def __len__(self) -> int:
        return int(self.inputs.shape[0])

    def batches(self, batch_size: int, generator: torch.Generator | None = None,
                shard: tuple[int, int] = (0, 1), drop_last: bool = True,
                ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Shuffled mini-batches of this rank's shard (rank, world_size) of the samples."""
        rank, world = shard
        order = (torch.randperm(len(self), generator=generator) if generator is not None
                 else torch.arange(len(self)))
        # Every rank gets the same number of samples, so data-parallel ranks step in lockstep.
        order = order[: len(order) - len(order) % world][rank::world]
        stop = len(order) - (len(order) % batch_size if drop_last else 0)
        for start in range(0, stop, batch_size):
            index = order[start:start + batch_size]
            yield self.inputs[index], self.targets[index]


class Workload(ABC):
    """A standardized training workload; unsupported combinations raise NotImplementedError."""

    name: ClassVar[str]
    summary: ClassVar[str]
    presets: ClassVar[dict[str, Preset]]
    image_model: ClassVar[bool] = True
    # Layers that tensor parallelism leaves whole though it could split them (by name).
    tensor_parallel_replicated: ClassVar[tuple[str, ...]] = ()

    def preset(self, size: str) -> Preset:
        try:
            return self.presets[size]
        except KeyError:
            raise UsageError(
                f"unknown size {size!r} for {self.name}; choose from: {', '.join(self.presets)}"
            ) from None

    @abstractmethod
    def build_model(self, size: str) -> nn.Module: ...

    @abstractmethod
    def synthetic_batch(self, size: str, batch: int, device: torch.device | str,
                        generator: torch.Generator | None = None,
                        ) -> tuple[torch.Tensor, torch.Tensor]:
        """Random inputs and targets of the preset's shape, for throughput runs."""

    def synthetic_samples(self, size: str, first: int, count: int, seed: int,
                          ) -> tuple[torch.Tensor, torch.Tensor]:
        """Samples `first` .. `first + count - 1` of a run's synthetic stream, on the CPU:
        sample i is drawn from its own generator seeded by (seed, i), so a step's global batch
        is the same samples however many ranks share it out."""
        drawn = [self.synthetic_batch(size, 1, "cpu", sample_generator(seed, index))
                 for index in range(first, first + count)]
        return torch.cat([x for x, _ in drawn]), torch.cat([y for _, y in drawn])

    @abstractmethod
    def loss(self, output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor: ...

    def optimizer_spec(self, size: str) -> tuple[type[torch.optim.Optimizer], dict[str, Any]]:
        """The optimizer class and its arguments (a strategy may shard or wrap it)."""
        return torch.optim.SGD, {"lr": self.preset(size).lr, "momentum": 0.9,
                                 "weight_decay": 5e-5}

    def optimizer(self, model: nn.Module, size: str) -> torch.optim.Optimizer:
        cls, kwargs = self.optimizer_spec(size)
        return cls(model.parameters(), **kwargs)

    @abstractmethod
    def datasets(self, size: str, data_path: str | None, seed: int) -> tuple[Dataset, Dataset]:
        """Real (train, eval) data for time-to-train: built-in or the user's `--data` file."""

    @abstractmethod
    def evaluate(self, model: nn.Module, data: Dataset, batch: int, device: torch.device,
                 autocast: Callable[[], Any]) -> dict[str, float]:
        """Quality on the eval split; the target's metric must be among the keys."""

    def check(self, backend: str, precision: str, mode: str, size: str) -> None:
        """Raise NotImplementedError for a combination this workload does not support."""

    def tokens_per_sample(self, size: str) -> int | None:
        """Tokens a sample holds (a language model's window), None for other inputs: the
        throughput in tokens/s is samples/s times this."""
        shape = self.preset(size).input_shape
        return int(shape[0]) if not self.image_model and len(shape) == 1 else None

    def positions_per_sample(self, size: str) -> int:
        """Terms one sample adds to a weight's gradient sum: a token window's length, an
        image's pixels (a convolution's output positions are at most these); the length of
        the longest sum that runs of other rank counts order differently is this times the
        samples of a step (harness/compare/rounding.py)."""
        shape = self.preset(size).input_shape
        return int(math.prod(shape[1:])) if len(shape) > 1 else int(shape[0])

    def tensor_parallel_refusal(self, size: str, tp: int) -> str | None:
        """Why `tp` tensor-parallel ranks cannot split this model (None: they can)."""
        return None

    def token_ids(self, size: str) -> Any:
        """Real text as token ids for `dtbench data make --format tokens`; None where the
        workload has none (random ids are written)."""
        return None

    def run_settings(self, size: str, device: torch.device, precision: str) -> dict[str, Any]:
        """What a run records about how this workload executed (the attention kernel)."""
        return {}

    def facts(self, size: str) -> dict[str, Any]:
        """Facts beyond the common ones for `describe` (a transformer's FLOPs per token)."""
        return {}

    def describe(self, size: str) -> dict[str, Any]:
        preset = self.preset(size)
        return {
            "workload": self.name,
            "size": size,
            "summary": self.summary,
            "parameters": count_parameters(self, size),
            "flops_per_sample": count_flops_per_sample(self, size),
            "input_shape": list(preset.input_shape),
            "num_classes": preset.num_classes,
            "default_batch_size": dict(preset.batch_size),
            "default_steps": preset.steps,
            "default_warmup": preset.warmup,
            "data": preset.data,
            "target": {
                "metric": preset.target.metric,
                "value": preset.target.value,
                "higher_is_better": preset.target.higher_is_better,
                "max_epochs": preset.target.max_epochs,
            },
            "notes": preset.notes,
            **({"tokens_per_sample": tokens} if (tokens := self.tokens_per_sample(size)) else {}),
            **self.facts(size),
        }


WORKLOADS: Registry[type[Workload]] = Registry("workload")


def sample_generator(seed: int, index: int) -> torch.Generator:
    """The generator of synthetic sample `index` under `seed`: numpy's SeedSequence mixes the
    pair into one well-spread 64-bit seed (no two pairs share a stream as seed + index
    would)."""
    import numpy as np

    state = np.random.SeedSequence([seed, index]).generate_state(1, dtype=np.uint64)[0]
    return torch.Generator().manual_seed(int(state))


def get_workload(name: str) -> Workload:
    return WORKLOADS.get(name)()
