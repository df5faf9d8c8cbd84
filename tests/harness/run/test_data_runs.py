"""`dtbench data make`, then throughput and time-to-train runs reading the files at 1 and 2
ranks, each rank its own disjoint shard; bad datasets are exit 2 before any run, a bad sample
a failed record naming it (or skipped and counted); `data bench` prints the loader curve."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.records.record import metric
from harness.store.directory import Store

TINY = ("--size", "tiny", "--threads", "1", "-q", "--peak", "cached")
MADE = {"imagefolder": "resnet50", "webdataset": "alexnet", "hdf5": "hep_cnn",
        "tokens": "lstm"}


def make(cli_runner: Any, tmp_path: Path, fmt: str, samples: int = 48) -> Path:
    target = tmp_path / f"data-{fmt}"
    made = cli_runner("data", "make", "-w", MADE[fmt], "--size", "tiny", "--format", fmt,
                      "--samples", str(samples), "-o", str(target), cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    assert f"{samples} {MADE[fmt]}/tiny samples as {fmt}" in made.stdout
    return target


def records(store: Path) -> list[dict[str, Any]]:
    return sorted(Store(str(store)).records(), key=lambda r: r["spec"]["world_size"])


# Every format's reader is tested in-process (tests/workloads); end to end, at 1 and 2 ranks,
# the image folder and the token file in CI, the other two with --matrix (40 s each).
@pytest.mark.parametrize("fmt", [
    "imagefolder", "tokens", pytest.param("webdataset", marks=pytest.mark.matrix),
    pytest.param("hdf5", marks=pytest.mark.matrix)])
def test_made_dataset_feeds_throughput_and_time_to_train_at_1_and_2_ranks(
        tmp_path: Path, cli_runner: Any, fmt: str) -> None:
    data = make(cli_runner, tmp_path, fmt)
    store = tmp_path / "store"
    common = ("-w", MADE[fmt], *TINY, "--data", str(data), "-n", "1,2", "--batch-size", "4",
              "--out", str(store))
    run = cli_runner("run", *common, "--steps", "3", "--warmup", "1", "--loader-workers", "1",
                     cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    found = records(store)
    assert [r["spec"]["world_size"] for r in found] == [1, 2]
    for record in found:
        assert record["status"] == "success" and record["spec"]["data"] == str(data)
        assert record["spec"]["loader_workers"] == 1
        wait = metric(record, "data_wait")
        assert wait is not None and wait["format"] == fmt and wait["value"] >= 0
        if fmt == "imagefolder":  # 48 samples over 10 class folders
            assert sum(wait["class_counts"].values()) == 48
        share = metric(record, "data_wait_share")
        assert share is not None and isinstance(share["input_bound"], bool)
        per_rank = wait["sample_ids_per_rank"]
        assert len(per_rank) == record["spec"]["world_size"]
        read = [set(ids) for ids in per_rank]
        assert all(len(ids) == 4 * 4 for ids in per_rank)  # warm-up + 3 steps of 4
        if len(read) == 2:
            assert not read[0] & read[1]  # each rank its own shard
    ttt = cli_runner("run", *common, "--mode", "ttt", "--out", str(tmp_path / "ttt"),
                     cwd=tmp_path)
    assert "Traceback" not in ttt.stderr, ttt.stderr
    trained = records(tmp_path / "ttt")
    assert [r["spec"]["world_size"] for r in trained] == [1, 2]
    for record in trained:
        assert record["status"] == "success" or "not reached" in record["error"], \
            record["error"]
        assert metric(record, "quality") is not None


def test_bad_datasets_are_exit_2_before_any_run(tmp_path: Path, cli_runner: Any) -> None:
    data = make(cli_runner, tmp_path, "webdataset", samples=16)
    shard = next(data.glob("*.tar"))
    shard.write_bytes(shard.read_bytes()[:3000])
    store = tmp_path / "store"
    run = cli_runner("run", "-w", "alexnet", *TINY, "--data", str(data), "--out", str(store),
                     cwd=tmp_path)
    assert run.returncode == 2 and str(shard) in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and not store.exists()
    wrong = cli_runner("run", "-w", "lstm", *TINY, "--data", str(data), "--out", str(store),
                       cwd=tmp_path)
    assert wrong.returncode == 2 and "this workload reads a tokens file" in wrong.stderr


def test_a_corrupt_image_fails_the_record_or_is_skipped(tmp_path: Path,
                                                        cli_runner: Any) -> None:
    data = make(cli_runner, tmp_path, "imagefolder", samples=16)
    victim = sorted(data.rglob("*.jpg"))[3]
    victim.write_bytes(b"\xff\xd8 not a picture")
    store = tmp_path / "store"
    base = ("run", "-w", "resnet50", *TINY, "--data", str(data), "--batch-size", "16",
            "--steps", "2", "--warmup", "1")
    failed = cli_runner(*base, "--out", str(store), cwd=tmp_path)
    assert failed.returncode == 1
    (record,) = records(store)
    assert record["status"] == "failed" and str(victim) in record["error"]
    assert "cannot decode" in record["error"] and "\n" not in record["error"]
    skipped = cli_runner(*base, "--skip-bad-samples", "--out", str(tmp_path / "skip"),
                         cwd=tmp_path)
    assert skipped.returncode == 0, skipped.stderr
    (record,) = records(tmp_path / "skip")
    assert metric(record, "data_wait")["skipped_samples"] >= 1


def test_data_bench_prints_the_loader_curve(tmp_path: Path, cli_runner: Any) -> None:
    data = make(cli_runner, tmp_path, "hdf5", samples=32)
    out = tmp_path / "bench.json"
    bench = cli_runner("data", "bench", "-w", "hep_cnn", "--size", "tiny", "--data", str(data),
                       "--workers", "0,1", "--batches", "2", "--batch-size", "4", "--json",
                       str(out), cwd=tmp_path)
    assert bench.returncode == 0, bench.stderr
    rows = json.loads(out.read_text())["rows"]
    assert sorted({r["workers"] for r in rows}) == [0, 1]
    assert all(r["samples"] == 8 and r["samples_per_s"] > 0 for r in rows)
    assert "samples/s" in bench.stdout
