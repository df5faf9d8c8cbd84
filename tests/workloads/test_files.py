"""Datasets in files: what `data make` writes in each format, the loader's shards (disjoint
sample ids), and every bad input as one clear line naming the file."""
from __future__ import annotations

import os
import tarfile
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from harness.core.errors import RunFailed, UsageError
from workloads import get_workload
from workloads.files import (
    FORMATS,
    BadSample,
    FileBatches,
    LoaderOptions,
    check_dataset,
    file_batches,
    file_datasets,
    workload_shape,
)
from workloads.files.input_pipeline import FileSamples, one_line
from workloads.files.make import make_dataset

MADE = {"imagefolder": "resnet50", "webdataset": "alexnet", "hdf5": "hep_cnn",
        "tokens": "lstm"}


def made(tmp_path: Path, fmt: str, samples: int = 40) -> tuple[str, Path]:
    name = MADE[fmt]
    shape, classes, _ = workload_shape(get_workload(name), "tiny")
    target = tmp_path / fmt
    make_dataset(fmt, str(target), samples=samples, shape=shape, num_classes=classes)
    return name, target


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_format_reads_back_in_the_workload_shape_in_disjoint_shards(
        tmp_path: Path, fmt: str) -> None:
    name, path = made(tmp_path, fmt)
    workload = get_workload(name)
    assert check_dataset(workload, "tiny", str(path)) == fmt
    shape, _, tokens = workload_shape(workload, "tiny")
    seen = []
    for rank in range(2):
        found, feed = file_batches(workload, "tiny", str(path), 4, (rank, 2), LoaderOptions())
        assert found == fmt and len(feed) == 20
        ids = []
        for inputs, targets, batch_ids in feed.epoch_batches():
            assert tuple(inputs.shape[1:]) == shape and len(targets) == len(inputs) == 4
            assert inputs.dtype == (torch.int64 if tokens else torch.float32)
            ids += batch_ids.tolist()
        assert len(ids) == len(set(ids)) == 20
        seen.append(set(ids))
    assert not seen[0] & seen[1] and len(seen[0] | seen[1]) == 40


def test_jpeg_files_are_real_photographs_in_size(tmp_path: Path) -> None:
    target = tmp_path / "big"
    made_info = make_dataset("imagefolder", str(target), samples=4, shape=(3, 224, 224),
                             num_classes=1000)
    per_image = made_info["bytes"] / 4  # type: ignore[operator]
    assert 20_000 < per_image < 200_000  # ImageNet's average is ~110 kB
    first = next(target.rglob("*.jpg")).read_bytes()
    assert first[:2] == b"\xff\xd8"  # a JPEG stream
    assert not (tmp_path / ".big.partial").exists()


def test_time_to_train_splits_hold_out_every_fifth_sample(tmp_path: Path) -> None:
    name, path = made(tmp_path, "imagefolder")
    train, evaluation = file_datasets(get_workload(name), "tiny", str(path), LoaderOptions())
    assert len(train) == 32 and len(evaluation) == 8
    batches = list(train.batches(8, shard=(0, 1)))
    assert len(batches) == 4 and batches[0][0].shape == (8, 3, 32, 32)


def _corrupt_first_jpeg(path: Path) -> Path:
    victim = sorted(path.rglob("*.jpg"))[0]
    victim.write_bytes(b"\xff\xd8 this is not a JPEG")
    return victim


@pytest.mark.parametrize("workers", [0, 1])
def test_a_corrupt_jpeg_fails_naming_the_file_or_is_skipped_and_counted(
        tmp_path: Path, workers: int) -> None:
    name, path = made(tmp_path, "imagefolder", samples=20)
    victim = _corrupt_first_jpeg(path)
    workload = get_workload(name)
    _, feed = file_batches(workload, "tiny", str(path), 20, (0, 1), LoaderOptions(workers))
    with pytest.raises(RunFailed) as caught:
        next(feed.forever())
    message = str(caught.value)
    assert str(victim) in message and "cannot decode" in message and "\n" not in message
    _, skipping = file_batches(workload, "tiny", str(path), 10, (0, 1),
                               LoaderOptions(workers, skip_bad=True))
    total = sum(len(ids) for _, _, ids in skipping.epoch_batches())
    assert total == 19 and skipping.skipped == 1


def test_a_truncated_tar_shard_is_a_usage_error_naming_it(tmp_path: Path) -> None:
    name, path = made(tmp_path, "webdataset", samples=20)
    shard = next(path.glob("*.tar"))
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    with pytest.raises(UsageError, match=str(shard)):
        check_dataset(get_workload(name), "tiny", str(path))


def test_a_shard_sample_without_its_label_is_named(tmp_path: Path) -> None:
    shard = tmp_path / "shards" / "shard-000000.tar"
    shard.parent.mkdir()
    source = tmp_path / "0001.jpg"
    source.write_bytes(b"\xff\xd8")
    with tarfile.open(shard, "w") as tar:
        tar.add(source, arcname="0001.jpg")
    with pytest.raises(UsageError, match="sample 0001 has no 0001.cls"):
        check_dataset(get_workload("alexnet"), "tiny", str(shard.parent))


def test_data_make_writes_hdf5s_one_layout_read_by_chunk_without_a_note(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    name, path = made(tmp_path, "hdf5", samples=6)
    [file] = sorted(path.glob("*.h5"))
    with h5py.File(file, "r") as handle:
        assert sorted(handle.keys()) == ["data", "label"]
        assert handle["data"].shape[0] == 6 and handle["data"].chunks[0] == 1
    train, held = file_datasets(get_workload(name), "tiny", str(path), LoaderOptions())
    assert len(train) + len(held) == 6
    assert "old layout" not in capsys.readouterr().err


def test_hdf5_with_wrong_keys_or_shapes_is_refused(tmp_path: Path) -> None:
    workload = get_workload("hep_cnn")
    wrong = tmp_path / "wrong.h5"
    with h5py.File(wrong, "w") as handle:
        handle["pixels"] = np.zeros((4, 3, 32, 32), np.float32)
        handle["label"] = np.zeros(4, np.int64)
    with pytest.raises(UsageError, match="no dataset 'data' \\(found label, pixels\\)"):
        check_dataset(workload, "tiny", str(wrong))
    shaped = tmp_path / "shaped.h5"
    with h5py.File(shaped, "w") as handle:
        handle["data"] = np.zeros((4, 3, 16, 16), np.float32)
        handle["label"] = np.zeros(4, np.int64)
    with pytest.raises(UsageError, match=r"shape \(3, 16, 16\); the workload takes"):
        check_dataset(workload, "tiny", str(shaped))


def test_empty_and_one_class_folders_are_refused(tmp_path: Path) -> None:
    workload = get_workload("resnet50")
    for name in ("a", "b"):
        (tmp_path / "empty" / name).mkdir(parents=True)
    with pytest.raises(UsageError, match="class folder a has no"):
        check_dataset(workload, "tiny", str(tmp_path / "empty"))
    (tmp_path / "one" / "a").mkdir(parents=True)
    (tmp_path / "one" / "a" / "x.jpg").write_bytes(b"")
    with pytest.raises(UsageError, match="needs at least 2"):
        check_dataset(workload, "tiny", str(tmp_path / "one"))
    with pytest.raises(UsageError, match="no such file"):
        check_dataset(workload, "tiny", str(tmp_path / "absent"))
    (tmp_path / "one" / "b").mkdir()
    (tmp_path / "one" / "b" / "y.jpg").write_bytes(b"")
    (tmp_path / "one" / "loose.jpg").write_bytes(b"")
    with pytest.raises(UsageError, match=r"1 image\(s\) outside the class folders \(e.g. loose"):
        check_dataset(workload, "tiny", str(tmp_path / "one"))


def test_an_unbalanced_folder_shows_its_class_counts(tmp_path: Path) -> None:
    name, path = made(tmp_path, "imagefolder", samples=20)  # 2 images in each of 10 classes
    for extra in range(6):
        (path / "class_000" / f"extra{extra}.jpg").write_bytes(
            next((path / "class_001").glob("*.jpg")).read_bytes())
    _, feed = file_batches(get_workload(name), "tiny", str(path), 4, (0, 1), LoaderOptions())
    counts = feed.samples.source.class_counts()
    assert counts["class_000"] == 8 and counts["class_001"] == 2 and sum(counts.values()) == 26


def test_tokens_outside_the_vocabulary_are_refused(tmp_path: Path) -> None:
    folder = tmp_path / "tokens"
    folder.mkdir()
    np.array([1, 2, 5000] * 40, dtype="<i4").tofile(folder / "tokens.bin")
    with pytest.raises(UsageError, match=r"vocabulary is \[0, 1000\)"):
        check_dataset(get_workload("lstm"), "tiny", str(folder))


class DyingSamples(FileSamples):
    """A loader worker that dies on its first sample."""

    def __getitem__(self, index: int):  # type: ignore[no-untyped-def]
        os._exit(3)


def test_a_dying_loader_worker_fails_the_run_in_one_line(tmp_path: Path) -> None:
    name, path = made(tmp_path, "hdf5", samples=8)
    _, feed = file_batches(get_workload(name), "tiny", str(path), 4, (0, 1), LoaderOptions())
    dying = DyingSamples(feed.samples.source, 32, True, False)
    batches = FileBatches(dying, 4, (0, 1), LoaderOptions(workers=1), "test")
    with pytest.raises(RunFailed, match="a loader worker failed") as caught:
        next(batches.forever())
    assert "\n" not in str(caught.value)


def test_one_line_takes_a_workers_last_line() -> None:
    wrapped = RuntimeError("Caught BadSample in DataLoader worker process 0.\nOriginal "
                           "Traceback (most recent call last):\n  File x\n"
                           "workloads.files.formats.BadSample: /d/a.jpg: cannot decode")
    assert one_line(wrapped) == "/d/a.jpg: cannot decode"
    assert issubclass(BadSample, RunFailed)
