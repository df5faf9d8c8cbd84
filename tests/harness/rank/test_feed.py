"""The synthetic feed draws samples by global index (issue 57): data shard s of b takes samples
s·b .. s·b+b−1 of the step's global batch, each from (seed, index), so n shards of b see the
samples one rank of n·b sees; records say so (trajectory.sampling)."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from harness.rank.feed import SAMPLINGS, Feed, sampling
from harness.spec.specs import RunSpec
from workloads import WORKLOADS, get_workload

SCHEMA = Path(__file__).resolve().parents[3] / "harness" / "records" / "record.schema.json"


def fake_trainer(spec: RunSpec, shard: tuple[int, int]) -> Any:
    return SimpleNamespace(spec=spec, workload=get_workload(spec.workload),
                           data_shard=lambda: shard, to_device=lambda x, y: (x, y),
                           device=torch.device("cpu"))


@pytest.mark.parametrize("name", WORKLOADS.names())
def test_a_step_s_samples_do_not_depend_on_how_ranks_share_them(name: str) -> None:
    workload = get_workload(name)
    whole = workload.synthetic_samples("tiny", 0, 4, seed=3)
    halves = [workload.synthetic_samples("tiny", first, 2, seed=3) for first in (0, 2)]
    for got, parts in zip(whole, zip(*halves, strict=True), strict=True):
        assert torch.equal(got, torch.cat(parts))
    assert torch.equal(workload.synthetic_samples("tiny", 3, 1, seed=3)[0], whole[0][3:])
    other = workload.synthetic_samples("tiny", 0, 4, seed=4)[0]
    assert not torch.equal(other, whole[0])  # another seed, other samples


def test_each_data_shard_takes_its_slice_of_the_global_batch() -> None:
    spec = RunSpec(workload="gpt", size="tiny", batch_per_rank=3, nproc_per_node=2, seed=5)
    one = Feed(fake_trainer(RunSpec(workload="gpt", size="tiny", batch_per_rank=6, seed=5),
                            (0, 1)), 0)
    shards = [Feed(fake_trainer(spec, (s, 2)), s) for s in (0, 1)]
    inputs, targets, wait = one.next()
    assert wait == 0.0
    assert torch.equal(inputs, torch.cat([shard.batch[0] for shard in shards]))
    assert torch.equal(targets, torch.cat([shard.batch[1] for shard in shards]))


def test_records_name_how_their_samples_were_drawn() -> None:
    assert sampling(RunSpec(workload="gpt", size="tiny")) == "global-index"
    assert sampling(RunSpec(workload="gpt", size="tiny", data="/d")) == "shuffled"
    assert sampling(RunSpec(workload="gpt", size="tiny", mode="ttt")) == "shuffled"
    written = json.loads(SCHEMA.read_text())["properties"]["trajectory"]["properties"]
    # "per-shard" is what records without the field did: never written
    assert set(written["sampling"]["enum"]) == set(SAMPLINGS) - {"per-shard"}
