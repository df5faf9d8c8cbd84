"""`compare --trajectory` across rank counts: a 2 x 16 run and a 1 x 32 run of the same model
compare the loss over each step's 32 samples, the mean over the worker ranks weighted by
their samples; no rank is dropped, and where no such mean exists the comparison says why."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.commands.cli import main
from harness.compare.trajectory import compare_trajectories
from harness.core.errors import UsageError
from tests.harness.compare.test_compare import make_record, steady_steps, write

# per-step losses of the two halves of a 32-sample batch, and of the whole batch
HALVES = ([2.5, 2.25, 2.0, 1.875], [2.25, 2.0, 1.75, 1.625])
WHOLE = [2.375, 2.125, 1.875, 1.75]


def _run(losses: list[list[float]], batch: int, strategy: str = "ddp", **spec: Any
         ) -> dict[str, Any]:
    ranks = len(losses)
    record = make_record(f"r{ranks}-{strategy}", steady_steps(), strategy=strategy,
                         batch_per_rank=batch, nproc_per_node=ranks, world_size=ranks, **spec)
    record["trajectory"] = {"ranks": list(range(ranks)), "first_step": 1,
                            "samples_per_step": batch * ranks, "sampling": "global-index",
                            "losses": losses, "step_seconds": None, "evaluations": []}
    return record


def _trajectory(record: dict[str, Any]) -> dict[str, Any]:
    return {**record["trajectory"], "spec": record["spec"]}


def test_two_ranks_against_one_compare_the_loss_over_the_whole_batch(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    two = write(tmp_path / "a.json", _run([list(v) for v in HALVES], 16))
    one = write(tmp_path / "b.json", _run([WHOLE], 32))
    assert main(["compare", "--trajectory", two, one]) == 0
    out = capsys.readouterr().out
    assert "mean over 2 and 1 worker rank(s), weighted by samples" in out
    assert "same trajectory" in out
    # rank 1 counts: pairing rank 0 alone with the whole batch parts at the first step
    found = compare_trajectories(_trajectory(_run([HALVES[0]], 32)),
                                 _trajectory(_run([WHOLE], 32)))
    assert found.first_divergent_step == 1
    shifted = _run([HALVES[0], [v + 0.5 for v in HALVES[1]]], 16)
    assert main(["compare", "--trajectory", write(tmp_path / "c.json", shifted), one]) == 1
    assert "diverged at step 1" in capsys.readouterr().out


def test_replicas_that_differ_or_uneven_shares_are_refused_with_the_reason() -> None:
    one = _trajectory(_run([WHOLE], 32))
    with pytest.raises(UsageError, match="replicas that differ between exchanges"):
        compare_trajectories(_trajectory(_run([list(v) for v in HALVES], 16, "localsgd")), one)
    uneven = _trajectory(_run([list(v) for v in HALVES], 16))
    uneven["spec"] = {**uneven["spec"], "batch_per_rank": 8}
    with pytest.raises(UsageError, match="do not each cover batch_per_rank"):
        compare_trajectories(uneven, one)


def _per_shard(record: dict[str, Any]) -> dict[str, Any]:
    """The record as written before trajectory.sampling: synthetic batches per data shard."""
    found = _trajectory(record)
    found.pop("sampling")
    return found


def test_samples_drawn_per_shard_compare_only_at_the_same_shard_count() -> None:
    two, one = _run([list(v) for v in HALVES], 16), _run([WHOLE], 32)
    with pytest.raises(UsageError, match=r"per data shard from seed \+ shard index .* 2 shard"
                                         r"\(s\) of 16 and 1 of 32 samples do not see the same"):
        compare_trajectories(_per_shard(two), _per_shard(one))
    assert compare_trajectories(_per_shard(two), _per_shard(two)).same
    with pytest.raises(UsageError, match="the runs saw different samples: the baseline's were "
                                         "synthetic, each data shard's batch drawn from seed"):
        compare_trajectories(_per_shard(two), _trajectory(two))


def test_runs_that_read_other_samples_are_refused_and_other_seeds_diverge() -> None:
    synthetic = _trajectory(_run([WHOLE], 32))
    files = _trajectory(_run([WHOLE], 32, data="/tokens"))
    files["sampling"] = "shuffled"
    with pytest.raises(UsageError, match="the candidate's read from the data set"):
        compare_trajectories(synthetic, files)
    ttt = {**files, "spec": {**files["spec"], "mode": "ttt"}}
    with pytest.raises(UsageError, match="a throughput run and a ttt run read different"):
        compare_trajectories(files, ttt)
    # other seeds are other trainings, however close their losses
    found = compare_trajectories(synthetic, _trajectory(_run([WHOLE], 32, seed=7)))
    assert not found.same and found.first_divergent_step == 1 and found.max_difference == 0
    assert found.render("a", "b").startswith(
        "diverged at step 1 (the seeds differ, 0 and 7: other first parameters and samples)")
    moved = _trajectory(_run([WHOLE], 32, data="/elsewhere"))
    moved["sampling"] = "shuffled"
    assert compare_trajectories(files, moved).notes == (
        "the runs read --data /tokens and /elsewhere: the same samples only if these hold the "
        "same files",)
