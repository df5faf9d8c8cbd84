"""Priority-ordered pulls (harness/strategies/priority.py) over two real ranks, a worker and a
ps-sync server, on a model registered in the opposite order to its forward pass: with
priority on, the worker asks for, and the server sends, the tensors in the forward's order,
one piece each; off, the server sends its shard whole, in registration order. The pieces'
order is also checked against the plan without processes."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from harness.strategies.priority import pull_plan
from tests.distributed.test_strategies import ROOT, free_port

WORKER_AND_SERVER = """
import contextlib, json, os, sys
import torch, torch.distributed as dist
from torch import nn
sys.path.insert(0, os.environ["CHECK_ROOT"])
from harness.spec.specs import RunSpec
from harness.strategies.base import RankPlace, Recipe
from harness.strategies.ps import PSSync

class Backwards(nn.Module):
    # registered head first, but the forward pass runs body first
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(4, 2)
        self.body = nn.Linear(3, 4)
    def forward(self, x):
        return self.head(torch.relu(self.body(x)))

def build_model(compiled=True):
    torch.manual_seed(0)
    return Backwards()

dist.init_process_group("gloo", init_method="env://")
rank = dist.get_rank()
found = {}
for priority in ("false", "true"):
    spec = RunSpec("lstm", size="tiny", comm="gloo", nproc_per_node=2, batch_per_rank=4,
                   steps=3, strategy="ps-sync",
                   strategy_options=PSSync.parse_options({"priority": priority}))
    recipe = Recipe(build_model=build_model,
                    build_optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
                    optimizer_class=torch.optim.SGD, optimizer_kwargs={"lr": 0.1},
                    loss=nn.functional.cross_entropy, autocast=contextlib.nullcontext,
                    device=torch.device("cpu"))
    strategy = PSSync(spec, RankPlace(rank, 2, rank, torch.device("cpu")), recipe, None)
    strategy.setup()
    if strategy.serves:
        strategy.serve()
        found[priority] = strategy.step_stats()["sent_order"]
    else:
        orders, losses = [], []
        generator = torch.Generator().manual_seed(1)
        for _ in range(3):
            x, y = torch.randn(4, 3, generator=generator), torch.randint(0, 2, (4,))
            losses.append(float(strategy.step(x, y)))
            orders.append(strategy.step_stats()["pull_order"])
        strategy.finish()
        found[priority] = {"orders": orders, "losses": losses,
                           "forward_start": [s.get("forward_start") for s in
                                             strategy.clock.steps]}
    dist.barrier()
print("RESULT", rank, json.dumps(found), flush=True)
dist.destroy_process_group()
"""


def test_the_plan_cuts_tensors_at_shard_boundaries_in_forward_order() -> None:
    # tensors of 3, 5 and 2 elements, two shards [0, 5) and [5, 10); forward order 2, 0, 1
    per_server, pieces = pull_plan([3, 5, 2], [2, 0, 1], [(0, 5), (5, 10)])
    assert pieces == [(1, 8, 10, 2), (0, 0, 3, 0), (0, 3, 5, 1), (1, 5, 8, 1)]
    assert per_server == [[(0, 3), (3, 5)], [(3, 5), (0, 3)]]


@pytest.mark.slow
def test_pull_order_follows_the_forward_with_priority_and_registration_without() -> None:
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
           "WORLD_SIZE": "2", "CHECK_ROOT": str(ROOT), "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-c", WORKER_AND_SERVER],
                              env={**env, "RANK": str(r)}, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in range(2)]
    outputs = [proc.communicate(timeout=120)[0] for proc in procs]
    assert all(proc.returncode == 0 for proc in procs), outputs
    worker, server = (json.loads(next(line for line in out.splitlines()
                                      if line.startswith("RESULT")).split(" ", 2)[2])
                      for out in outputs)
    registration = ["head.weight", "head.bias", "body.weight", "body.bias"]
    forward = ["body.weight", "body.bias", "head.weight", "head.bias"]
    assert worker["false"]["orders"] == [registration] * 3
    # the first step's forward is not known yet: it pulls in registration order
    assert worker["true"]["orders"] == [registration, forward, forward]
    # the server sent the whole shard (26 parameters) off, one piece per tensor on, in the
    # forward's order: body.weight is [10, 22) of the flat vector, body.bias [22, 26), ...
    assert server["false"] == [[0, 26]]
    assert server["true"] == [[10, 22], [22, 26], [0, 8], [8, 10]]
    assert worker["true"]["losses"] == pytest.approx(worker["false"]["losses"], rel=1e-6)
    assert all(t is not None and t >= 0 for t in worker["true"]["forward_start"])
