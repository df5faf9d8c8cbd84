"""The input pipeline as training uses it: a dataset of files, decoded and augmented sample by
sample, through torch's DataLoader with worker processes, prefetch, pinned memory and a
DistributedSampler, so that each rank (each data shard) reads its own disjoint samples.

Images are decoded with Pillow and augmented with torchvision's transforms v2 on uint8 tensors
(MLPerf's ResNet-50 reference: a random resized crop and a horizontal flip; the evaluation
split a resize and centre crop), then converted to float and normalised. HDF5 arrays and token
windows need no decoding. A sample that cannot be read or decoded fails the run with one line
naming the file and the sample, or with skip_bad is left out of its batch and counted.
"""
from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, DistributedSampler, default_collate

from workloads.files.formats import BadSample, Source

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)  # ImageNet's, as torchvision's
LOADER_TIMEOUT_S = 120  # a worker silent this long fails the run (no hang)
PREFETCH = 2  # batches each worker keeps ready (DataLoader's default)


def image_transform(side: int, train: bool) -> Any:
    """uint8 CHW -> float CHW of side x side: random resized crop + flip (train) or resize +
    centre crop (evaluation), then normalised."""
    from workloads.external import import_torchvision

    v2 = import_torchvision("transforms.v2")
    geometry = ([v2.RandomResizedCrop(side, antialias=True), v2.RandomHorizontalFlip()]
                if train else [v2.Resize(side, antialias=True), v2.CenterCrop(side)])
    return v2.Compose([*geometry, v2.ToDtype(torch.float32, scale=True),
                       v2.Normalize(MEAN, STD)])


def decode_image(payload: bytes) -> torch.Tensor:
    """JPEG/PNG bytes -> uint8 CHW RGB."""
    from PIL import Image

    with Image.open(io.BytesIO(payload)) as image:
        image.load()
        pixels = np.asarray(image.convert("RGB"))
    return torch.from_numpy(pixels.copy()).permute(2, 0, 1)


class FileSamples(torch.utils.data.Dataset):
    """Sample i of a source as (input, target, i): decoded and transformed for images, as
    arrays otherwise. With skip_bad a bad sample is None (the collate leaves it out)."""

    def __init__(self, source: Source, side: int, train: bool, skip_bad: bool) -> None:
        self.source, self.side, self.train, self.skip_bad = source, side, train, skip_bad
        self._transform: Any = None

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, Any, int] | None:
        try:
            return self._load(index)
        except BadSample:
            if self.skip_bad:
                return None
            raise

    def _load(self, index: int) -> tuple[torch.Tensor, Any, int]:
        payload, label = self.source.read(index)
        if self.source.kind == "tokens":
            window = torch.from_numpy(payload)
            return window[:-1], window[1:], index
        if self.source.kind == "array":
            return torch.from_numpy(payload), label, index
        try:
            pixels = decode_image(payload)
        except Exception as exc:  # noqa: BLE001 - Pillow raises many kinds on bad bytes
            raise BadSample(f"{self.source.name(index)}: cannot decode the image "
                            f"({' '.join(str(exc).split()) or type(exc).__name__})") from None
        if self._transform is None:
            self._transform = image_transform(self.side, self.train)
        return self._transform(pixels), label, index


def collate(samples: list[Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """(inputs, targets, sample ids, samples skipped) of the samples that loaded."""
    good = [s for s in samples if s is not None]
    skipped = len(samples) - len(good)
    if not good:
        return torch.empty(0), torch.empty(0), torch.empty(0, dtype=torch.long), skipped
    inputs, targets, ids = default_collate(good)
    return inputs, torch.as_tensor(targets), ids, skipped


@dataclass
class LoaderOptions:
    workers: int = 0
    skip_bad: bool = False
    pin_memory: bool = False
    seed: int = 0


class FileBatches:
    """A rank's batches of a file dataset, epoch after epoch (the sampler reshuffled each
    epoch): `batches()` iterates one epoch as the in-memory Dataset does, `forever()` without
    end for throughput runs; `skipped` counts the bad samples left out so far."""

    def __init__(self, samples: FileSamples, batch: int, shard: tuple[int, int],
                 options: LoaderOptions, description: str) -> None:
        self.samples, self.batch, self.shard, self.options = samples, batch, shard, options
        self.description = description
        self.skipped = 0
        self.sampler = DistributedSampler(samples, num_replicas=shard[1], rank=shard[0],
                                          shuffle=True, seed=options.seed, drop_last=True)
        workers = options.workers
        self.loader = DataLoader(samples, batch_size=batch, sampler=self.sampler,
                                 num_workers=workers, collate_fn=collate, drop_last=True,
                                 pin_memory=options.pin_memory,
                                 prefetch_factor=PREFETCH if workers else None,
                                 persistent_workers=workers > 0,
                                 timeout=LOADER_TIMEOUT_S if workers else 0)
        self.epoch = 0

    def __len__(self) -> int:
        """Samples this rank reads an epoch."""
        return len(self.sampler)

    def epoch_batches(self) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """One epoch's (inputs, targets, sample ids) of this rank; failures as one line."""
        self.sampler.set_epoch(self.epoch)
        self.epoch += 1
        iterator = iter(self.loader)
        while True:
            try:
                inputs, targets, ids, skipped = next(iterator)
            except StopIteration:
                return
            except Exception as exc:  # noqa: BLE001 - a worker's error, re-raised here
                raise BadSample(one_line(exc)) from None
            self.skipped += skipped
            if len(ids):
                yield inputs, targets, ids

    def forever(self) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        while True:
            count = 0
            for batch in self.epoch_batches():
                count += 1
                yield batch
            if count == 0:
                raise BadSample(f"{self.description}: an epoch gave no batch of "
                                f"{self.batch} for this rank")


def one_line(exc: BaseException) -> str:
    """A loader failure as one line: a worker's exception arrives as "Caught X in DataLoader
    worker process N. Original Traceback ...": its last line is the error itself."""
    text = str(exc).strip()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    last = lines[-1] if lines else type(exc).__name__
    for prefix in ("workloads.files.formats.BadSample: ", "BadSample: "):
        if last.startswith(prefix):
            return last[len(prefix):]
    if "exited unexpectedly" in text or "timed out" in text:
        return f"a loader worker failed: {lines[0] if lines else last}"
    return last
