"""Where a throughput step's batch comes from: one synthetic batch kept in memory (the
default, its samples drawn by global sample index), or the next batch of `--data` files
through the loader (workloads/files), whose wait the step pays and the record keeps
(data_wait)."""
from __future__ import annotations

import time
from typing import Any

import torch

from harness.rank.trainer import Trainer
from harness.spec.specs import RunSpec

MAX_IDS = 4096  # sample ids a record keeps (which samples each rank read: disjoint shards)

# How a run draws its samples: the record's `trajectory.sampling`, by which `compare
# --trajectory` knows whether two runs saw the same samples each step. "per-shard" is never
# written: it is what a record without the field did in throughput mode.
SAMPLINGS = {
    "global-index": "synthetic, the same batch every step, sample i of the step's global "
                    "batch drawn from (seed, i) whatever the rank count",
    "shuffled": "read from the data set, each step's global batch the next slice of one "
                "shuffle under the seed, dealt out among the data shards whatever the rank "
                "count",
    "per-shard": "synthetic, each data shard's batch drawn from seed + shard index (records "
                 "written before trajectory.sampling): other shard counts see other samples",
}


def sampling(spec: RunSpec) -> str:
    """How a run of `spec` draws its samples (a key of SAMPLINGS)."""
    return "shuffled" if spec.mode == "ttt" or spec.data else "global-index"


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
        # Data shard s takes samples s*b .. s*b+b-1 of the step's global batch, each drawn
        # from (seed, its index): n shards of b see the samples one rank of n*b sees, and the
        # ranks of a tensor-parallel group or a pipeline (one shard) share their batch.
        first = trainer.data_shard()[0] * spec.batch_per_rank
        inputs, targets = trainer.workload.synthetic_samples(spec.size, first,
                                                             spec.batch_per_rank, spec.seed)
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
