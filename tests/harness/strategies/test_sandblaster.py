"""Sandblaster L-BFGS without processes: the coordinator's commands on sharded vectors give
torch.optim.LBFGS's iterates on a convex problem; the portion schedule, replayed on a simulated
clock, finishes batches sooner with backup copies when one replica is 3x slower, keeps the
first copy of each portion and hands a lost replica's portions back; the analytic bytes."""
from __future__ import annotations

import math

import pytest
import torch

from harness.strategies import volumes
from harness.strategies.lbfgs import Coordinator, G, LocalShards
from harness.strategies.sandblaster_scheduler import PortionScheduler

FEATURES, CLASSES = 12, 4


def convex_problem() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(256, FEATURES, generator=generator)
    labels = (inputs[:, :CLASSES] * 2 + torch.randn(256, CLASSES, generator=generator)) \
        .argmax(dim=1)
    return inputs, labels


def loss_of(flat: torch.Tensor, inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Softmax regression with an L2 term: convex in (W, b)."""
    weight = flat[:FEATURES * CLASSES].view(FEATURES, CLASSES)
    bias = flat[FEATURES * CLASSES:]
    return torch.nn.functional.cross_entropy(inputs @ weight + bias, labels) \
        + 0.005 * flat.pow(2).sum()


@pytest.mark.parametrize("shards", [1, 3])
def test_iterates_equal_torch_lbfgs_on_a_convex_problem(shards: int) -> None:
    inputs, labels = convex_problem()
    start = torch.randn(FEATURES * CLASSES + CLASSES, generator=torch.Generator().manual_seed(1))
    history, iterations = 3, 14  # the history fills and wraps
    reference = start.clone().requires_grad_()
    optimizer = torch.optim.LBFGS([reference], lr=1.0, max_iter=1, history_size=history)
    expected = []
    for _ in range(iterations):
        def closure() -> torch.Tensor:
            optimizer.zero_grad()
            loss = loss_of(reference, inputs, labels)
            loss.backward()
            return loss
        optimizer.step(closure)
        expected.append(reference.detach().clone())

    bounds = torch.linspace(0, start.numel(), shards + 1).long().tolist()
    pieces = list(zip(bounds[:-1], bounds[1:], strict=True))
    local = LocalShards([start[lo:hi].clone() for lo, hi in pieces])
    coordinator = Coordinator(history, lr=1.0)
    outcomes = []
    for step in range(iterations):
        flat = torch.cat([shard[0] for shard in local.shards]).requires_grad_()
        (gradient,) = torch.autograd.grad(loss_of(flat, inputs, labels), flat)
        for shard, (lo, hi) in zip(local.shards, pieces, strict=True):
            shard[G].copy_(gradient[lo:hi])
        outcomes.append(coordinator.iterate(local))
        found = torch.cat([shard[0] for shard in local.shards])
        # float32 rounding (the shards sum partial dot products): 1e-6 of values near 1-5
        torch.testing.assert_close(found, expected[step], rtol=1e-5, atol=1e-5)
    assert outcomes.count("step") == iterations  # every iteration moved, none degenerate
    assert len(coordinator.slots) == history


def simulate(backup_after: float, *, batches: int = 6, portions: int = 6,
             lose_at: tuple[int, int] | None = None) -> tuple[float, PortionScheduler]:
    """Replay the coordinator's schedule with replica 0 taking 1 time unit a portion and
    replica 1 three (a 3x straggler); returns when the last batch was complete. `lose_at`
    (batch, replica) loses that replica when that batch starts its second portion."""
    now = [0.0]
    schedule = PortionScheduler(portions, backup_after, clock=lambda: now[0])
    speed = {0: 1.0, 1: 3.0}
    busy: dict[int, tuple[float, int, int]] = {}  # replica -> (done at, batch, portion)
    alive = {0, 1}
    for batch in range(batches):
        schedule.begin(batch)
        while not schedule.complete:
            for replica in sorted(alive - set(busy)):
                portion, _ = schedule.assign(replica)
                if portion is not None:
                    busy[replica] = (now[0] + speed[replica], batch, portion)
            if lose_at == (batch, 1) and 1 in alive and len(schedule.pending) < portions - 1:
                alive.discard(1)
                busy.pop(1, None)
                assert schedule.lose(1)  # its running portion is handed back
                continue
            idle = alive - set(busy)
            now[0] = min([t for t, _, _ in busy.values()]
                         + [schedule.due(r) for r in idle] + [math.inf])
            for replica, (done, of_batch, portion) in list(busy.items()):
                if done <= now[0]:
                    del busy[replica]
                    if of_batch != batch:
                        schedule.finish_late(replica)
                    elif schedule.finish(replica, portion):
                        schedule.confirm(replica, portion)
    for replica in busy:  # copies of the last batch still running: they lost
        schedule.finish_late(replica)
    return now[0], schedule


def test_backup_copies_shorten_batches_with_a_3x_straggler() -> None:
    without, plain = simulate(math.inf)
    with_backups, backed = simulate(1.5)
    assert plain.backups_issued == 0 and plain.summary()["wasted_portions"] == 0
    assert backed.backups_issued >= 1 and backed.backups_won >= 1
    assert with_backups < without
    # the fast replica takes more portions than the straggler either way (load balancing)
    counts = backed.summary()["portions_by_worker"]
    assert counts["0"]["kept"] > 2 * counts["1"]["kept"]
    # every kept portion was computed; the copies that lost were wasted, nothing else
    for schedule in (plain, backed):
        kept = sum(c.kept for c in schedule.counts.values())
        assigned = sum(c.assigned for c in schedule.counts.values())
        assert kept == 6 * 6 and assigned - kept == schedule.summary()["wasted_portions"]


def test_the_first_copy_is_kept_and_the_second_wasted() -> None:
    now = [0.0]
    schedule = PortionScheduler(1, backup_after=1.0, clock=lambda: now[0])
    schedule.durations.append(1.0)  # a median portion of 1 s
    assert schedule.assign(1) == (0, False)
    assert schedule.assign(0) == (None, False) and schedule.due(0) == 1.0
    now[0] = 1.0
    assert schedule.assign(0) == (0, True)
    assert schedule.finish(0, 0) is True and schedule.finish(1, 0) is False
    assert schedule.backups_won == 1 and schedule.counts[1].wasted == 1


def test_a_lost_replica_does_not_stop_the_batch() -> None:
    finished, schedule = simulate(math.inf, batches=3, lose_at=(1, 1))
    assert schedule.reassigned >= 1 and schedule.complete
    assert schedule.counts[0].kept + schedule.counts[1].kept == 3 * 6


def test_the_coordinators_messages_are_small_beside_the_vectors() -> None:
    megabyte = 2.0 ** 20
    args = {"servers": 2, "portions": 8, "history": 10, "header_bytes": 64, "result_bytes": 16}
    roles = {role: volumes.sandblaster(megabyte, 5, role=role, **args)
             for role in ("worker", "coordinator", "server")}
    mean = volumes.sandblaster(megabyte, 5, **args)
    for kind in volumes.KINDS:  # 2 replicas, a coordinator, 2 shards
        assert mean[kind] == pytest.approx((2 * roles["worker"][kind] + roles["coordinator"][
            kind] + 2 * roles["server"][kind]) / 5)
    assert roles["worker"]["gradient"] == 4 * megabyte  # 8 portions over 2 replicas
    assert roles["server"]["parameter"] == megabyte     # its half to each of 2 replicas
    coordinator = volumes.total(roles["coordinator"])
    assert roles["coordinator"]["control"] == coordinator < 0.01 * megabyte
    assert volumes.sandblaster_commands(10) == (51, 23)
