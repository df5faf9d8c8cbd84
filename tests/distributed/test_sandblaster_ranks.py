"""Sandblaster L-BFGS over real ranks (docs/guide/strategies.md): one replica follows
torch.optim.LBFGS through the wire, with the bytes the volumes say; two replicas, a
coordinator and a shard train lstm tiny to its target; a 3x straggler's portions get backup
copies that win (none with backups off); a replica killed mid-batch does not stop it."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.distributed.test_ddp import dtbench, leftover, metric, records
from tests.distributed.test_strategies import expected, mean_counted, run_check

RUN = ("-w", "lstm", "--size", "tiny", "-n", "4", "--strategy", "sandblaster", "--threads",
       "1", "-q", "--rank-timeout", "90", "--batch-size", "64")


@pytest.mark.slow
def test_one_replica_follows_torch_lbfgs_through_the_wire(tmp_path: Path) -> None:
    entries = ["lbfgs:batch=8,history=2", "sandblaster:portions=4,batch=8,history=2"]
    report = run_check(tmp_path, "lstm", entries, world=3)
    reference, found = report[entries[0]], report[entries[1]]
    np.testing.assert_allclose(found["losses"], reference["losses"], rtol=1e-5)
    for mine, theirs in zip(found["parameters"], reference["parameters"], strict=True):
        np.testing.assert_allclose(mine, theirs, rtol=1e-4, atol=1e-5)
    counted = mean_counted(found["counted"])
    analytic = expected("sandblaster", "lstm", 3, portions=4, history=2)
    # every portion pushed once; one fetch a batch, and the check's last one (to read the
    # final parameters), which the shard counts among its 3 batches
    assert counted["gradient"] == pytest.approx(analytic["gradient"], rel=1e-6)
    assert counted["parameter"] == pytest.approx(analytic["parameter"] * 4 / 3, rel=1e-6)


@pytest.mark.slow
def test_two_replicas_train_lstm_tiny_to_its_target_and_backups_cover_a_straggler(
        tmp_path: Path) -> None:
    out = tmp_path / "store"
    result = dtbench("run", *RUN, "--mode", "ttt", "--straggler", "1:3", "--out", str(out))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    (record,) = records(out)
    assert metric(record, "quality")["reached"] is True
    comm = metric(record, "comm_bytes")
    assert comm["roles"] == ["worker", "worker", "coordinator", "server"]
    # the coordinator's commands and answers beside a replica's gradients: under 1%
    coordinator = comm["per_rank"][2]
    assert 0 < coordinator < 0.01 * metric(record, "comm_bytes_gradient")["per_rank"][0]
    portions = metric(record, "portions_rerun")
    assert portions["backups_issued"] >= 1 and portions["backups_won"] >= 1, portions
    by_worker = portions["portions_by_worker"]
    assert by_worker["0"]["kept"] > by_worker["1"]["kept"]  # the fast replica took more


@pytest.mark.slow
def test_without_backups_a_straggler_gets_none_and_a_lost_replica_hands_its_portion_back(
        tmp_path: Path) -> None:
    out = tmp_path / "store"
    result = dtbench("run", *RUN, "--strategy-opt", "backup_after=inf", "--straggler", "1:3",
                     "--steps", "8", "--warmup", "1", "--out", str(out),
                     env={"DTBENCH_FAULT": "kill:1:3"})
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    (record,) = records(out)
    assert record["status"] == "success", record["error"]
    portions = metric(record, "portions_rerun")
    assert portions["backups_issued"] == 0
    # killed after taking its first portion of batch 3: that portion went to replica 0
    (lost,) = metric(record, "lost_workers")["lost"]
    assert lost["rank"] == 1 and lost["batch"] == 3 and len(lost["portions_handed_back"]) == 1
    assert portions["reassigned_portions"] == 1 and portions["batches"] == 9
    assert leftover([record["run_id"]]) == []
