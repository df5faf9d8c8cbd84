"""The parameter server's update rules without a process group: pushes go straight to the
server's bookkeeping (no fetch is pending, so nothing is sent)."""
from __future__ import annotations

import pytest
import torch

from harness.comm.paramserver import Server


def _server(rule: str, damp_stale: bool, clients: int = 2) -> Server:
    # lr 1 and no momentum: every update subtracts exactly the gradient it applies
    return Server(torch.zeros(2), lambda params: torch.optim.SGD(params, lr=1.0),
                  range(clients), rule, staleness=1.0, damp_stale=damp_stale)


@pytest.mark.parametrize("damp_stale", [True, False])
def test_async_rule_scales_a_stale_gradient_by_one_over_one_plus_its_staleness(
        damp_stale: bool) -> None:
    server = _server("async", damp_stale)
    server._push(0, torch.tensor([1.0, 2.0]), step=1, version_seen=0)  # fresh: staleness 0
    assert server.param.detach().tolist() == [-1.0, -2.0]
    # computed at version 0, applied at version 1 (staleness 1), then one at staleness 2
    server._push(1, torch.tensor([2.0, 4.0]), step=1, version_seen=0)
    server._push(0, torch.tensor([3.0, 3.0]), step=2, version_seen=0)
    expected = [-1.0 - 1.0 - 1.0, -2.0 - 2.0 - 1.0] if damp_stale else [-6.0, -9.0]
    assert server.param.detach().tolist() == expected
    assert server.stats.staleness == [0, 1, 2]  # recorded the same either way


@pytest.mark.parametrize("damp_stale", [True, False])
def test_clock_rule_damps_each_gradient_by_its_own_staleness_before_the_mean(
        damp_stale: bool) -> None:
    server = _server("clock", damp_stale)
    # clock 0: both workers computed at version 0 (fresh): the plain mean
    server._push(0, torch.tensor([2.0, 2.0]), step=1, version_seen=0)
    assert server.version == 0  # waits for the other worker's clock 0
    server._push(1, torch.tensor([4.0, 0.0]), step=1, version_seen=0)
    assert server.version == 1 and server.param.detach().tolist() == [-3.0, -1.0]
    # clock 1 (applied at version 1): worker 0 ran ahead on version 0 (staleness 1, s=1
    # allows it), worker 1 fetched version 1 (fresh)
    server._push(0, torch.tensor([4.0, 4.0]), step=2, version_seen=0)
    server._push(1, torch.tensor([2.0, 2.0]), step=2, version_seen=1)
    mean = [(2.0 + 2.0) / 2] * 2 if damp_stale else [(4.0 + 2.0) / 2] * 2
    assert server.param.detach().tolist() == [-3.0 - mean[0], -1.0 - mean[1]]
    assert server.stats.staleness == [0, 0, 1, 0]


def test_fresh_gradients_are_never_damped() -> None:
    """ps-sync (bound 0) and a single worker see only fresh gradients: the switch is inert."""
    runs = []
    for damp_stale in (True, False):
        server = _server("async", damp_stale, clients=1)
        for step in range(1, 4):
            server._push(0, torch.tensor([1.0, -1.0]) * step, step=step,
                         version_seen=server.version)
        runs.append(server.param.detach().tolist())
    assert runs[0] == runs[1] == [-6.0, 6.0]
