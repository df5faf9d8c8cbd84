"""Where a throughput step's batch comes from: one synthetic batch kept in memory (the
default), or the next batch of `--data` files through the loader (workloads/files), whose
wait the step pays and the record keeps (data_wait)."""
from __future__ import annotations

import time
from typing import Any

import torch

from harness.rank.trainer import Trainer

MAX_IDS = 4096  # sample ids a record keeps (which samples each rank read: disjoint shards)


class Feed:
    """next() gives the step's (inputs, targets) on the device and the seconds the loop
    waited for them (0 for the synthetic batch)."""

    def __init__(self, trainer: Trainer, rank: int) -> None:
        spec = trainer.spec
        self.trainer = trainer
        self.files: Any = None
        self.format = "synthetic"
        self.waits: list[float] = []
        if spec.data:
            from workloads.files import file_batches, loader_options

            options = loader_options(spec, pin_memory=trainer.device.type == "cuda")
            self.format, self.files = file_batches(trainer.workload, spec.size, spec.data,
                                                   spec.batch_per_rank, trainer.data_shard(),
                                                   options)
            self._batches = self.files.forever()
            self.ids: list[int] = []
            return
        # Drawn per data shard, not per rank: the ranks of a tensor-parallel group or a
        # pipeline share their batch, as they do reading real data.
        generator = torch.Generator().manual_seed(spec.seed + trainer.data_shard()[0])
        inputs, targets = trainer.workload.synthetic_batch(spec.size, spec.batch_per_rank,
                                                           "cpu", generator)
        self.batch = trainer.to_device(inputs, targets)

    def next(self) -> tuple[torch.Tensor, torch.Tensor, float]:
        if self.files is None:
            return (*self.batch, 0.0)
        started = time.perf_counter()
        inputs, targets, ids = next(self._batches)  # a bad sample: RunFailed, one line
        self.ids.extend(int(i) for i in ids)
        inputs, targets = self.trainer.to_device(inputs, targets)
        return inputs, targets, time.perf_counter() - started

    def summary(self, measured_waits: list[float]) -> dict[str, Any]:
        """What the record keeps of the feed (RankResult.data)."""
        if self.files is None:
            return {}
        spec = self.trainer.spec
        return {"format": self.format, "path": spec.data, "loader_workers": spec.loader_workers,
                "shard_samples": len(self.files), "skipped": self.files.skipped,
                "waits": measured_waits, "samples_read": len(self.ids),
                "distinct_samples": len(set(self.ids)), "sample_ids": self.ids[:MAX_IDS],
                "page_cache": "warm (not dropped)",
                "class_counts": getattr(self.files.samples.source, "class_counts", dict)()}
