"""FSDP2 with a gradient scaler: an inf in one rank's gradient shard makes every rank skip
the step and lower the scale alike (torch's DTensor dispatch reduces GradScaler's found-inf
over the mesh), through dtbench's own backward and optimizer_step, with and without
clipping. On CPU over gloo, with torch.amp.GradScaler("cpu"); a CUDA fp16 run takes the same
DTensor path with the CUDA scaler (backends/cuda.py), on a GPU this test cannot reach.
"""
from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

import pytest
import torch.multiprocessing as mp

ROOT = Path(__file__).resolve().parents[2]


def _rank(rank: int, port: int, out: str, max_norm: float | None) -> None:
    sys.path.insert(0, str(ROOT))
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.distributed.fsdp import fully_shard

    from harness.strategies.base import backward, optimizer_step

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2))
    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)

    def full() -> list[torch.Tensor]:
        return [p.full_tensor().clone() for p in model.parameters()]

    steps = []
    for poisoned in (True, False):
        before = full()
        backward(model(torch.ones(4, 8)).square().sum(), scaler)
        if poisoned and rank == 1:
            model[0].weight.grad.to_local().view(-1)[0] = float("inf")
        optimizer_step(optimizer, scaler, model, max_norm)
        optimizer.zero_grad()
        after = full()
        changed = [not torch.equal(a, b) for a, b in zip(before, after, strict=True)]
        steps.append({"stepped": any(changed), "scale": scaler.get_scale(),
                      "params": [t.sum().item() for t in after]})
    Path(out, f"{rank}.json").write_text(json.dumps(steps))
    dist.barrier()  # both ranks' results are on disk
    # gloo's teardown aborts now and then after a finished run ("terminate called without an
    # active exception", about 1 in 12 here): the results are written, so leave without it
    os._exit(0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("max_norm", [None, 1.0])
def test_an_inf_in_one_ranks_shard_skips_the_step_on_every_rank(
        tmp_path: Path, max_norm: float | None) -> None:
    mp.start_processes(_rank, args=(_free_port(), str(tmp_path), max_norm), nprocs=2,
                       join=True, start_method="spawn")
    ranks = [json.loads((tmp_path / f"{rank}.json").read_text()) for rank in (0, 1)]
    for steps in ranks:
        poisoned, clean = steps
        assert not poisoned["stepped"] and poisoned["scale"] == 512.0
        assert clean["stepped"] and clean["scale"] == 512.0
    assert ranks[0][1]["params"] == ranks[1][1]["params"]  # the same model after the step
