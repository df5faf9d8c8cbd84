"""The asynchronous rules evaluate the model they claim: the parameters a worker evaluates in
time-to-train are the servers' after the updates its steps counted (samples_to_target counts
those steps), not the copy it fetched before its last step. Checked on real ranks by the
version the worker evaluated and by float64 checksums of the evaluated parameters and the
servers' shards (the run's last evaluation is the one that ended it, so the servers hold
nothing newer)."""
from __future__ import annotations

from typing import Any

import pytest

from harness.run.launch import launch
from harness.rundir import RankResult
from harness.spec.specs import LaunchOptions, RunSpec

TTT = RunSpec(workload="hep_cnn", size="tiny", mode="ttt", batch_per_rank=16, threads=1,
              comm="gloo", peak="cached")


def _ranks(strategy: str, world: int, **options: Any) -> tuple[list[RankResult],
                                                                list[RankResult]]:
    spec = TTT.replace(strategy=strategy, nproc_per_node=world,
                       strategy_options=tuple(options.items()))
    ranks = launch(spec, LaunchOptions(), f"evaluated-{strategy}",
                   lambda phase, done, total: None)
    assert ranks is not None
    workers = [r for r in ranks if r.role != "server"]
    servers = [r for r in ranks if r.role == "server"]
    return workers, servers


def test_one_ps_async_worker_evaluates_the_model_after_all_its_steps(cache_dir: Any) -> None:
    (worker,), (server,) = _ranks("ps-async", 2, servers=1)
    stats, served = worker.strategy_stats, server.strategy_stats
    steps = len(worker.losses)
    assert worker.quality_history[-1]["step"] == steps
    # One worker: one update per step; the evaluated version is the last, not one behind.
    assert served["updates"] == steps
    assert stats["evaluated_version"] == steps
    assert stats["evaluated_checksum"] == served["shard_checksum"]


def test_downpour_evaluates_the_servers_state_and_trains_on_its_own_copy(
        cache_dir: Any) -> None:
    (worker,), (server,) = _ranks("downpour", 2, servers=1, n_fetch=2, n_push=2)
    steps = len(worker.losses)
    assert server.strategy_stats["updates"] == steps // 2
    assert worker.strategy_stats["evaluated_version"] == steps // 2
    assert worker.strategy_stats["evaluated_checksum"] == server.strategy_stats["shard_checksum"]


@pytest.mark.slow
@pytest.mark.parametrize(("strategy", "options"), [
    ("ps-sync", {"servers": 1}), ("ssp", {"servers": 1, "staleness": 2})])
def test_two_workers_under_the_clock_rule_evaluate_exactly_the_counted_clocks(
        cache_dir: Any, strategy: str, options: dict[str, Any]) -> None:
    workers, (server,) = _ranks(strategy, 3, **options)
    steps = len(workers[0].losses)
    assert [len(w.losses) for w in workers] == [steps, steps]
    assert server.strategy_stats["updates"] == steps
    for worker in workers:
        assert worker.strategy_stats["evaluated_version"] == steps
        assert worker.strategy_stats["evaluated_checksum"] == pytest.approx(
            server.strategy_stats["shard_checksum"], rel=1e-12)


@pytest.mark.slow
def test_hybrid_group_evaluates_the_servers_state(cache_dir: Any) -> None:
    workers, (server,) = _ranks("hybrid", 3, groups=1, servers=1)
    steps = len(workers[0].losses)
    assert server.strategy_stats["updates"] == steps
    assert workers[0].strategy_stats["evaluated_version"] == steps
    assert {w.strategy_stats["evaluated_checksum"] for w in workers} \
        == {server.strategy_stats["shard_checksum"]}


@pytest.mark.slow
def test_hogwild_ranks_evaluate_the_shared_model_at_rest(cache_dir: Any) -> None:
    workers, _ = _ranks("hogwild", 2)
    first, second = (w.strategy_stats["evaluated_checksum"] for w in workers)
    assert first == second
