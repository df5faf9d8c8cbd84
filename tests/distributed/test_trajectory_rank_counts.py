"""Issue 57's acceptance: `compare --trajectory` says "same" for trainings that are the same and
"diverged" for ones that are not. gpt tiny, 20 steps: one rank of 16 samples against 2 x 8 ddp,
2 x 8 fsdp and fsdp-tp (dp 2 x tp 2, 8 a replica), on synthetic batches (drawn by global sample
index: the same 16 samples on every side) and on a tokens file, all within the fp32 rounding
bound; a learning rate off by 1% (gpt) and a gradient summed instead of averaged (lstm, SGD:
under gpt's AdamW a gradient's scale divides out) parted from the same baseline."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.commands.cli import main
from harness.rundir import FAULT_VAR

pytestmark = pytest.mark.slow

COMMON = ["--size", "tiny", "--steps", "20", "--warmup", "1", "--threads", "1", "-q"]
GLOO = ["--comm", "gloo"]
RANKS = {"one": ["-n", "1", "--batch-size", "16"],
         "ddp": ["-n", "2", "--batch-size", "8", *GLOO, "--strategy", "ddp"],
         "fsdp": ["-n", "2", "--batch-size", "8", *GLOO, "--strategy", "fsdp"],
         "fsdp-tp": ["-n", "4", "--oversubscribe", "--batch-size", "8", *GLOO,
                     "--strategy", "fsdp-tp", "--strategy-opt", "tp=2"]}
# (store, workload, data, ranks, DTBENCH_FAULT)
RUNS = [*((f"{data}-{name}", "gpt", data, name, "") for data in ("synthetic", "tokens")
          for name in RANKS),
        ("lr", "gpt", "synthetic", "one", "lr-times:1.01"),
        ("lstm-one", "lstm", "synthetic", "one", ""),
        ("lstm-ddp", "lstm", "synthetic", "ddp", ""),
        ("lstm-sum", "lstm", "synthetic", "ddp", "sum-gradients")]


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("rank-counts")
    tokens = root / "tokens"
    assert main(["data", "make", "-w", "gpt", "--size", "tiny", "--format", "tokens",
                 "--samples", "2048", "-o", str(tokens)]) == 0
    found = {}
    for name, workload, data, ranks, fault in RUNS:
        found[name] = root / name
        extra = ["--data", str(tokens)] if data == "tokens" else []
        with pytest.MonkeyPatch.context() as patch:
            if fault:
                patch.setenv(FAULT_VAR, fault)
            assert main(["run", "-w", workload, *COMMON, *RANKS[ranks], *extra,
                         "--out", str(found[name])]) == 0, name
    return found


def compared(stores: dict[str, Path], a: str, b: str, tmp_path: Path,
             capsys: pytest.CaptureFixture[str]) -> tuple[int, str, dict]:
    capsys.readouterr()
    out_json = tmp_path / f"{a}-{b}.json"
    code = main(["compare", "--trajectory", str(stores[a]), str(stores[b]),
                 "--json", str(out_json)])
    return code, capsys.readouterr().out, json.loads(out_json.read_text())


@pytest.mark.parametrize("data", ["synthetic", "tokens"])
@pytest.mark.parametrize("candidate", ["ddp", "fsdp", "fsdp-tp"])
def test_one_rank_of_16_and_two_data_shards_of_8_train_the_same_model(
        stores: dict[str, Path], data: str, candidate: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, found = compared(stores, f"{data}-one", f"{data}-{candidate}", tmp_path, capsys)
    assert code == 0, out
    assert out.startswith("same trajectory: ")
    assert "bound: the fp32 rounding bound 2(k+1)·γ_n·max(1, |loss|) at step k" in out
    assert "n = 512 (16 samples x 32 positions)" in out
    assert found["steps"] == 20 and found["max_difference"] <= found["bound"]["at_worst_step"]
    print(f"{data} one vs {candidate}: largest difference {found['max_difference']:.3g} at "
          f"step {found['worst_step']}")


def test_a_learning_rate_off_by_one_percent_diverges(
        stores: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, found = compared(stores, "synthetic-one", "lr", tmp_path, capsys)
    assert code == 1 and out.startswith("diverged at step "), out
    assert found["max_difference"] > found["bound"]["at_first_divergent_step"]
    print(f"lr x 1.01: diverged at step {found['first_divergent_step']}, largest difference "
          f"{found['max_difference']:.3g}")


def test_a_gradient_summed_instead_of_averaged_diverges(
        stores: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = compared(stores, "lstm-one", "lstm-ddp", tmp_path, capsys)
    assert code == 0, out  # the same run averaging its gradient is the same model
    code, out, found = compared(stores, "lstm-one", "lstm-sum", tmp_path, capsys)
    assert code == 1 and out.startswith("diverged at step 1 "), out
    print(f"summed gradient: diverged at step 1, largest difference "
          f"{found['max_difference']:.3g}")
