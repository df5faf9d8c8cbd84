"""Datasets read from files as training reads them (formats.py: the formats; make.py: `dtbench
data make`; input_pipeline.py: the DataLoader). A workload reads `--data PATH` through here in
throughput runs, and in time-to-train runs for the formats of formats.FORMATS."""
from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

from workloads.files.formats import FORMATS, BadSample, detect, open_source
from workloads.files.input_pipeline import FileBatches, FileSamples, LoaderOptions

if TYPE_CHECKING:
    from workloads.base import Dataset, Workload

EVAL_EVERY = 5  # every fifth sample is held out for evaluation in time-to-train runs
MAX_EVAL = 2000

__all__ = ["FORMATS", "BadSample", "FileBatches", "LoaderOptions", "TrainFiles", "check_dataset",
           "detect",
           "file_batches", "file_datasets", "is_file_dataset", "workload_shape"]


def is_file_dataset(path: str | None) -> bool:
    """A --data path in one of FORMATS (not the arrays and text of workloads/data.py)."""
    if not path:
        return False
    try:
        return detect(path) in FORMATS
    except Exception:  # noqa: BLE001 - not a file dataset; workloads/data.py judges it
        return False


def workload_shape(workload: Workload, size: str) -> tuple[tuple[int, ...], int, bool]:
    """(sample shape, classes or vocabulary, reads tokens) of a workload at a size."""
    preset = workload.preset(size)
    return tuple(preset.input_shape), preset.num_classes, len(preset.input_shape) == 1


def _samples(workload: Workload, size: str, path: str, train: bool, skip_bad: bool
             ) -> tuple[str, FileSamples]:
    shape, classes, tokens = workload_shape(workload, size)
    fmt, source = open_source(path, num_classes=classes, shape=shape, tokens=tokens)
    return fmt, FileSamples(source, shape[-1], train, skip_bad)


def check_dataset(workload: Workload, size: str, path: str) -> str:
    """Open and check a file dataset for a workload (UsageError naming the problem); its
    format."""
    return _samples(workload, size, path, True, False)[0]


def file_batches(workload: Workload, size: str, path: str, batch: int, shard: tuple[int, int],
                 options: LoaderOptions) -> tuple[str, FileBatches]:
    """(format, this shard's batches) of a file dataset, for a throughput run."""
    fmt, samples = _samples(workload, size, path, True, options.skip_bad)
    return fmt, FileBatches(samples, batch, shard, options, f"--data {path}")


class TrainFiles:
    """A time-to-train run's training split of a file dataset, with the in-memory Dataset's
    face: its length and `batches(batch, generator, shard)` one epoch at a time."""

    def __init__(self, samples: FileSamples, indices: list[int], options: LoaderOptions,
                 description: str) -> None:
        self.subset = torch.utils.data.Subset(samples, indices)
        self.options, self.description = options, description
        self._loaders: dict[tuple[int, tuple[int, int]], FileBatches] = {}

    def __len__(self) -> int:
        return len(self.subset)

    @property
    def skipped(self) -> int:
        return sum(loader.skipped for loader in self._loaders.values())

    def batches(self, batch_size: int, generator: torch.Generator | None = None,
                shard: tuple[int, int] = (0, 1), drop_last: bool = True
                ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        key = (batch_size, shard)
        if key not in self._loaders:
            self._loaders[key] = FileBatches(self.subset, batch_size, shard,  # type: ignore[arg-type]
                                             self.options, self.description)
        for inputs, targets, _ in self._loaders[key].epoch_batches():
            yield inputs, targets


def file_datasets(workload: Workload, size: str, path: str, options: LoaderOptions
                  ) -> tuple[TrainFiles, Dataset]:
    """Time-to-train splits of a file dataset: every EVAL_EVERY-th sample (up to MAX_EVAL)
    held out and decoded once without augmentation into memory; the rest read through the
    loader."""
    from workloads.base import Dataset

    _, train = _samples(workload, size, path, True, options.skip_bad)
    _, held = _samples(workload, size, path, False, False)
    every = list(range(len(train)))
    evaluation = every[::EVAL_EVERY][:MAX_EVAL]
    chosen = set(evaluation)
    rest = [i for i in every if i not in chosen]
    loaded = [held[i] for i in evaluation]
    inputs = torch.stack([item[0] for item in loaded])
    targets = (torch.stack([item[1] for item in loaded]) if isinstance(loaded[0][1], torch.Tensor)
               else torch.as_tensor([item[1] for item in loaded]))
    description = f"{path} ({len(rest)} training samples read by the loader)"
    return (TrainFiles(train, rest, options, description),
            Dataset(inputs, targets, f"{path}: every {EVAL_EVERY}th sample, "
                    f"{len(evaluation)} held out"))


def loader_options(spec: Any, pin_memory: bool = False) -> LoaderOptions:
    """A run's loader settings from its spec."""
    return LoaderOptions(workers=int(getattr(spec, "loader_workers", 0) or 0),
                         skip_bad=bool(getattr(spec, "skip_bad_samples", False)),
                         pin_memory=pin_memory, seed=int(getattr(spec, "seed", 0) or 0))
