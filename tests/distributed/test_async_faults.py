"""Heterogeneity and faults under the asynchronous strategies (issue: stragglers and lost
workers): a worker killed mid-run is dropped and the others finish; a server's death fails the
run naming it; a 3x straggler makes ps-async's staleness larger (the recorded distribution,
not a time)."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.distributed.test_ddp import dtbench, leftover, metric, records

RUN = ("--size", "tiny", "--threads", "1", "--warmup", "1", "-q", "--rank-timeout", "60")


@pytest.mark.parametrize(("strategy", "options", "ranks", "killed", "lost"), [
    ("ps-async", (), 4, 1, [1]),
    # downpour drops a worker by ps-async's rule (updates on arrival): the full matrix
    pytest.param("downpour", ("n_fetch=2", "n_push=2"), 4, 2, [2], marks=pytest.mark.matrix),
    # ssp's clock waits only on live workers: the full matrix (ps-async and hybrid run by
    # default, on 2 cores each run is ~15 s)
    pytest.param("ssp", ("s=1",), 4, 1, [1], marks=pytest.mark.matrix),
    # Two groups of two: killing rank 3 takes its group (rank 2, its leader, with it).
    ("hybrid", ("groups=2",), 5, 3, [2]),
])
def test_a_killed_worker_is_dropped_and_the_others_finish(
        tmp_path: Path, strategy: str, options: tuple[str, ...], ranks: int, killed: int,
        lost: list[int]) -> None:
    out = tmp_path / "store"
    args = [arg for option in options for arg in ("--strategy-opt", option)]
    result = dtbench("run", "-w", "hep_cnn", "-n", str(ranks), "--strategy", strategy, *args,
                     *RUN, "--steps", "12", "--out", str(out),
                     env={"DTBENCH_FAULT": f"kill:{killed}:3"}, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    (record,) = records(out)
    assert record["status"] == "success", record["error"]
    found = metric(record, "lost_workers")
    assert found is not None, [m["name"] for m in record["metrics"]]
    # The leader of a dropped group is what the servers lose (its members never talk to them).
    assert [entry["rank"] for entry in found["lost"]] == lost
    assert all(entry["steps_pushed"] <= 1 + 3 + 1 for entry in found["lost"])
    survivors = metric(record, "throughput")["per_worker"]
    assert len(survivors) == ranks - 1 - (2 if strategy == "hybrid" else 1)
    assert leftover([record["run_id"]]) == []


def test_a_dead_server_fails_the_run_naming_it(tmp_path: Path) -> None:
    out = tmp_path / "store"
    result = dtbench("run", "-w", "hep_cnn", "-n", "3", "--strategy", "ps-async", *RUN,
                     "--steps", "12", "--out", str(out),
                     env={"DTBENCH_FAULT": "kill:2:3"}, timeout=300)
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    (record,) = records(out)
    assert record["status"] == "failed" and "rank 2" in record["error"], record["error"]
    assert leftover([record["run_id"]]) == []


def test_a_straggler_makes_ps_async_staler(tmp_path: Path) -> None:
    """Two workers, rank 1 a 3x straggler: while it computes one gradient the other pushes
    about three, so its gradients arrive three or more versions stale (about one without)."""
    def staleness_of_rank_1(*extra: str) -> list[float]:
        out = tmp_path / f"store{len(extra)}"
        result = dtbench("run", "-w", "hep_cnn", "-n", "3", "--strategy", "ps-async", *RUN,
                         "--steps", "12", "--out", str(out), *extra, timeout=300)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        (record,) = records(out)
        return metric(record, "staleness")["by_worker"]["1"]

    even, uneven = staleness_of_rank_1(), staleness_of_rank_1("--straggler", "1:3")
    # The fast worker ends its steps early; the straggler's gradients from before that are
    # the stale ones, and the stalest of them is staler than any without a straggler.
    assert max(uneven) >= 3 and max(uneven) > max(even), (uneven, even)
