"""Per-step losses in the records (issue: records tell the whole truth): a 2-rank ddp and a
2-rank fsdp run of lstm tiny hold both ranks' losses, `compare --trajectory` finds them the
same within the fp32 rounding bound, a run with another seed diverges at its first step, and
the HTML report draws the loss plot."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.commands.cli import main
from harness.compare.trajectory import compare_trajectories
from harness.records.schema import first_violation

RUN = ["run", "-w", "lstm", "--size", "tiny", "-n", "2", "--comm", "gloo", "--steps", "6",
       "--warmup", "1", "--threads", "1", "-q"]


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("trajectory")
    found = {}
    for name, extra in (("ddp", ["--strategy", "ddp"]), ("fsdp", ["--strategy", "fsdp"]),
                        ("seed", ["--strategy", "ddp", "--seed", "7"])):
        found[name] = root / name
        assert main([*RUN, *extra, "--out", str(found[name])]) == 0
    return found


def _record(store: Path) -> dict:
    (path,) = store.rglob("*.json")
    return json.loads(path.read_text())


def test_records_hold_every_rank_s_losses(stores: dict[str, Path]) -> None:
    for name in ("ddp", "fsdp"):
        record = _record(stores[name])
        assert first_violation(record) is None
        found = record["trajectory"]
        assert found["ranks"] == [0, 1]
        assert found["samples_per_step"] == record["spec"]["global_batch"]
        assert [len(row) for row in found["losses"]] == [6, 6]
        assert found["first_step"] == 1 and len(found["step_seconds"]) == 6
        assert all(isinstance(v, float) for row in found["losses"] for v in row)


def test_ddp_and_fsdp_train_the_same_model(stores: dict[str, Path],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["compare", "--trajectory", str(stores["ddp"]), str(stores["fsdp"])]) == 0
    out = capsys.readouterr().out
    assert out.startswith("same trajectory: ") and "bound: the fp32 rounding bound" in out
    ddp, fsdp = _record(stores["ddp"]), _record(stores["fsdp"])
    found = compare_trajectories({**ddp["trajectory"], "spec": ddp["spec"]},
                                 {**fsdp["trajectory"], "spec": fsdp["spec"]})
    assert found.same and found.steps == 6
    assert ddp["trajectory"]["sampling"] == "global-index"


def test_another_seed_diverges_at_its_first_step(stores: dict[str, Path],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["compare", "--trajectory", str(stores["ddp"]), str(stores["seed"])]) == 1
    out = capsys.readouterr().out
    assert out.startswith("diverged at step 1 (the seeds differ, 0 and 7: other first "
                          "parameters and samples)")


def test_the_html_report_draws_the_loss_plot(stores: dict[str, Path], tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    assert main(["report", str(stores["ddp"]), str(stores["fsdp"]), "-o", str(page)]) == 0
    text = page.read_text()
    assert "Training loss against samples and against time, per strategy." in text
    assert "No record holds per-step losses" not in text


def test_trajectory_needs_one_record_a_side(stores: dict[str, Path], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "--trajectory", str(stores["ddp"]), str(tmp_path)]) == 2


@pytest.mark.slow
def test_two_ranks_of_16_and_one_of_32_on_the_same_text_are_the_same(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each rank's loss covers its half of the step's batch: the mean over both ranks,
    weighted by samples, is the one-rank run's loss over all 32 (rank 0 alone parted at the
    first step)."""
    text = tmp_path / "text"
    assert main(["data", "make", "-w", "lstm", "--size", "tiny", "--format", "tokens",
                 "--samples", "512", "-o", str(text)]) == 0
    common = ["run", "-w", "lstm", "--size", "tiny", "--steps", "6", "--warmup", "1",
              "--threads", "1", "--data", str(text), "-q"]
    assert main([*common, "-n", "2", "--comm", "gloo", "--batch-size", "16", "--out",
                 str(tmp_path / "two")]) == 0
    assert main([*common, "-n", "1", "--batch-size", "32", "--out", str(tmp_path / "one")]) == 0
    capsys.readouterr()
    assert main(["compare", "--trajectory", str(tmp_path / "two"), str(tmp_path / "one")]) == 0
    out = capsys.readouterr().out
    assert "the mean over 2 and 1 worker rank(s), weighted by samples" in out
    assert out.startswith("same trajectory: ") and "samples: read from the data set" in out
