"""Built-in and user data for time-to-train runs: shapes, round trips and bad-input errors."""
from __future__ import annotations

import os
import zipfile

import h5py
import numpy as np
import pytest
import torch

from harness.core.errors import UsageError
from workloads import data as data_module
from workloads.data import (
    UNK,
    build_vocab,
    digits_images,
    load_image_arrays,
    text_datasets,
    tokenize,
)

# ---------------------------------------------------------------- digits

def test_digits_shapes_dtypes_and_train_normalisation() -> None:
    train, evaluation = digits_images(16, channels=3, seed=0)
    assert train.inputs.shape[1:] == (3, 16, 16) and evaluation.inputs.shape[1:] == (3, 16, 16)
    assert train.inputs.dtype == torch.float32 and train.targets.dtype == torch.int64
    assert len(train) + len(evaluation) == 1797
    assert 0.15 < len(evaluation) / 1797 < 0.25
    assert abs(train.inputs.mean().item()) < 1e-4
    assert abs(train.inputs.std().item() - 1.0) < 1e-3
    assert torch.equal(train.inputs[:, 0], train.inputs[:, 2])
    assert set(evaluation.targets.tolist()) == set(range(10))


def test_digits_split_is_seeded_and_disjoint() -> None:
    first, _ = digits_images(8, channels=1, seed=3)
    again, _ = digits_images(8, channels=1, seed=3)
    other, _ = digits_images(8, channels=1, seed=4)
    assert torch.equal(first.inputs, again.inputs)
    assert not torch.equal(first.targets, other.targets)
    train, evaluation = digits_images(8, channels=1, seed=0)
    train_rows = {tuple(row) for row in train.inputs.flatten(1).tolist()}
    shared = sum(tuple(row) in train_rows for row in evaluation.inputs.flatten(1).tolist())
    assert shared < 5  # only the handful of digits that are pixel-identical in the source


# ---------------------------------------------------------------- user image arrays

def _arrays(n: int = 10, layout: str = "nchw") -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    shape = {"nchw": (n, 3, 8, 8), "nhwc": (n, 8, 8, 3), "nhw": (n, 8, 8)}[layout]
    return rng.integers(0, 256, shape, dtype=np.uint8), np.arange(n) % 4


def _save_h5(path: str, **arrays: np.ndarray) -> None:
    with h5py.File(path, "w") as handle:
        for name, array in arrays.items():
            handle.create_dataset(name, data=array)


@pytest.mark.parametrize("layout", ["nchw", "nhwc", "nhw"])
@pytest.mark.parametrize("extension", [".npz", ".h5"])
def test_image_round_trip(tmp_path, layout: str, extension: str) -> None:
    images, labels = _arrays(10, layout)
    path = str(tmp_path / f"data{extension}")
    if extension == ".npz":
        np.savez(path, images=images, labels=labels)
    else:
        _save_h5(path, images=images, labels=labels)
    train, evaluation = load_image_arrays(path, None, 3, 4)
    assert len(train) == 8 and len(evaluation) == 2
    assert train.inputs.shape[1:] == (3, 8, 8) and train.inputs.dtype == torch.float32
    assert train.targets.dtype == torch.int64
    every = torch.cat([train.inputs, evaluation.inputs])
    assert 0.0 <= every.min().item() and every.max().item() <= 1.0
    if layout == "nhwc":
        nchw = images.transpose(0, 3, 1, 2)
    elif layout == "nhw":
        nchw = np.repeat(images[:, None], 3, axis=1)
    else:
        nchw = images
    order = torch.cat([train.targets, evaluation.targets])
    expected = torch.from_numpy(nchw.astype(np.float32) / 255.0)
    for image, label in zip(every, order, strict=True):
        assert any(labels[i] == label and torch.allclose(image, expected[i]) for i in range(10))


def test_old_hdf5_layout_is_read_with_a_deprecation_note(tmp_path, capsys) -> None:
    """images/labels in HDF5 is the old layout: read as before, with a note naming the file
    and the layout to write; .npz arrays keep their names and get no note."""
    images, labels = _arrays(10)
    old = str(tmp_path / "old.h5")
    _save_h5(old, images=images, labels=labels)
    train, evaluation = load_image_arrays(old, None, 3, 4)
    assert len(train) + len(evaluation) == 10
    note = capsys.readouterr().err
    assert note.startswith(f"dtbench: note: --data {old}: HDF5 datasets 'images'/'labels' are "
                           "the old layout")
    assert "'data' (N, C, H, W) and 'label' (N)" in note and "data make" in note
    load_image_arrays(old, None, 3, 4)
    assert capsys.readouterr().err == ""  # once a file and process
    arrays = str(tmp_path / "arrays.npz")
    np.savez(arrays, images=images, labels=labels)
    load_image_arrays(arrays, None, 3, 4)
    assert capsys.readouterr().err == ""


def test_eval_arrays_resize_and_aliases(tmp_path) -> None:
    images, labels = _arrays(6)
    path = str(tmp_path / "data.hdf5")
    _save_h5(path, x=images.astype(np.float32), y=labels,
             eval_images=images[:2].astype(np.float32), eval_labels=labels[:2])
    train, evaluation = load_image_arrays(path, 16, 3, 4)
    assert train.inputs.shape == (6, 3, 16, 16) and evaluation.inputs.shape == (2, 3, 16, 16)
    assert torch.equal(evaluation.targets, torch.tensor([0, 1]))


def test_single_channel_is_repeated_and_extra_channels_rejected(tmp_path) -> None:
    images, labels = _arrays(4, "nhw")
    path = str(tmp_path / "gray.npz")
    np.savez(path, images=images[:, :, :, None], labels=labels)
    train, _ = load_image_arrays(path, None, 3, 4)
    assert torch.equal(train.inputs[:, 0], train.inputs[:, 1])
    assert load_image_arrays(path, None, 1, 4)[0].inputs.shape[1:] == (1, 8, 8)
    rgb = str(tmp_path / "rgb.npz")
    np.savez(rgb, images=_arrays(4)[0], labels=labels)
    with pytest.raises(UsageError, match="rgb.npz.*3 channels"):
        load_image_arrays(rgb, None, 1, 4)


def _bad_npz(tmp_path, **arrays: np.ndarray) -> str:
    path = str(tmp_path / "bad.npz")
    np.savez(path, **arrays)
    return path


IMAGES, LABELS = _arrays(10)
BAD_ARRAYS = {
    "missing images": ({"pictures": IMAGES, "labels": LABELS}, r"found: 'labels', 'pictures'"),
    "missing labels": ({"images": IMAGES}, r"no array named 'labels' or 'y'"),
    "2-D images": ({"images": IMAGES[:, 0, 0], "labels": LABELS}, r"shape \(10, 8\)"),
    "5-D images": ({"images": IMAGES[..., None], "labels": LABELS}, r"expected \(N,H,W\)"),
    "length mismatch": ({"images": IMAGES, "labels": LABELS[:7]}, r"7 labels but there are 10"),
    "float labels": ({"images": IMAGES, "labels": LABELS + 0.5}, r"expected integer class"),
    "2-D labels": ({"images": IMAGES, "labels": LABELS[:, None]}, r"1-D array"),
    "negative label": ({"images": IMAGES, "labels": LABELS - 1}, r"\[-1, 2\]"),
    "label too large": ({"images": IMAGES, "labels": LABELS * 2}, r"\[0, 6\].*\[0, 3\]"),
    "empty images": ({"images": IMAGES[:0], "labels": LABELS[:0]}, r"empty"),
    "empty labels": ({"images": IMAGES, "labels": LABELS[:0]}, r"empty"),
    "nan pixels": ({"images": np.full((10, 3, 8, 8), np.nan, np.float32), "labels": LABELS},
                   r"NaN or infinite"),
    "inf pixels": ({"images": np.full((10, 3, 8, 8), np.inf), "labels": LABELS},
                   r"NaN or infinite"),
    "string images": ({"images": np.array(["a"] * 10), "labels": LABELS}, r"dtype <U1"),
    "half eval": ({"images": IMAGES, "labels": LABELS, "eval_images": IMAGES}, r"both or neither"),
    "eval shape": ({"images": IMAGES, "labels": LABELS, "eval_images": IMAGES[:, :1, :4],
                    "eval_labels": LABELS}, r"same shape"),
}


@pytest.mark.parametrize("case", sorted(BAD_ARRAYS))
def test_bad_arrays_raise_one_line_usage_error(tmp_path, case: str) -> None:
    arrays, message = BAD_ARRAYS[case]
    path = _bad_npz(tmp_path, **arrays)
    with pytest.raises(UsageError, match=message) as error:
        load_image_arrays(path, None, 3, 4)
    assert path in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("case", ["missing images", "length mismatch", "label too large"])
def test_bad_hdf5_arrays_name_the_file(tmp_path, case: str) -> None:
    arrays, message = BAD_ARRAYS[case]
    path = str(tmp_path / "bad.h5")
    _save_h5(path, **arrays)
    with pytest.raises(UsageError, match=message) as error:
        load_image_arrays(path, None, 3, 4)
    assert path in str(error.value)


def test_hdf5_string_dataset_rejected(tmp_path) -> None:
    path = str(tmp_path / "strings.h5")
    with h5py.File(path, "w") as handle:
        handle.create_dataset("images", data=np.array([b"a", b"b"]), dtype=h5py.string_dtype())
        handle.create_dataset("labels", data=np.array([0, 1]))
    with pytest.raises(UsageError, match="strings.h5.*expected a numeric array"):
        load_image_arrays(path, None, 3, 2)


def test_file_level_problems(tmp_path) -> None:
    missing = str(tmp_path / "nope.npz")
    with pytest.raises(UsageError, match="nope.npz: no such file"):
        load_image_arrays(missing, None, 3, 4)
    with pytest.raises(UsageError, match=r"unknown extension '\.csv'.*\.npz, \.h5, \.hdf5"):
        load_image_arrays(str(tmp_path / "data.csv"), None, 3, 4)
    folder = tmp_path / "folder.npz"
    folder.mkdir()
    with pytest.raises(UsageError, match="folder.npz: not a regular file"):
        load_image_arrays(str(folder), None, 3, 4)
    path = _bad_npz(tmp_path, images=IMAGES, labels=LABELS)
    with pytest.raises(UsageError, match=r"bad.npz: file is .* larger than the 100-byte limit"):
        load_image_arrays(path, None, 3, 4, max_bytes=100)
    compressed = str(tmp_path / "bomb.npz")
    np.savez_compressed(compressed, images=np.zeros((64, 3, 32, 32), np.uint8),
                        labels=np.zeros(64, np.int64))
    limit = os.path.getsize(compressed) + 10
    with pytest.raises(UsageError, match="bomb.npz: arrays decompress to"):
        load_image_arrays(compressed, None, 3, 4, max_bytes=limit)


@pytest.mark.parametrize("name,content,message", [
    ("text.npz", b"this is not a zip archive", "text.npz: not a valid .npz archive"),
    ("empty.npz", b"", "empty.npz: not a valid .npz archive"),
    ("text.h5", b"this is not HDF5 either", "text.h5: not a valid HDF5 file"),
    ("empty.hdf5", b"", "empty.hdf5: not a valid HDF5 file"),
])
def test_corrupt_files(tmp_path, name: str, content: bytes, message: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(UsageError, match=message):
        load_image_arrays(str(path), None, 3, 4)


def test_zip_without_arrays_and_plain_npy_rejected(tmp_path) -> None:
    path = tmp_path / "other.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("readme.txt", "hello")
    with pytest.raises(UsageError, match="other.npz: .* holds no .npy arrays"):
        load_image_arrays(str(path), None, 3, 4)
    npy = tmp_path / "single.npz"
    with open(npy, "wb") as handle:
        np.save(handle, IMAGES)
    with pytest.raises(UsageError, match="single.npz: not a valid .npz archive"):
        load_image_arrays(str(npy), None, 3, 4)


def test_unreadable_file(tmp_path, monkeypatch) -> None:
    path = _bad_npz(tmp_path, images=IMAGES, labels=LABELS)

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(data_module, "open", denied, raising=False)
    with pytest.raises(UsageError, match="bad.npz: cannot read the file .*Permission denied"):
        load_image_arrays(path, None, 3, 4)


UNPICKLED: list[bool] = []


def _tripwire() -> None:
    UNPICKLED.append(True)


class _Trap:
    """Unpickling this calls the tripwire: the loader must refuse before that can happen."""

    def __reduce__(self):
        return (_tripwire, ())


def test_pickled_object_array_rejected_without_unpickling(tmp_path) -> None:
    images = np.empty(10, dtype=object)
    images[:] = [_Trap() for _ in range(10)]
    path = str(tmp_path / "pickled.npz")
    np.savez(path, images=images, labels=LABELS)
    UNPICKLED.clear()
    with pytest.raises(UsageError, match="pickled.npz: array 'images' has object dtype"):
        load_image_arrays(path, None, 3, 4)
    assert UNPICKLED == []
    with np.load(path, allow_pickle=True) as npz:  # the archive really holds a live pickle
        npz["images"]
    assert UNPICKLED


# ---------------------------------------------------------------- text

def test_tokenize_words_punctuation_and_eos() -> None:
    assert tokenize("Hello, World!\n\nIt's <unk> here.\n") == [
        "hello", ",", "world", "!", "<eos>", "it's", "<unk>", "here", ".", "<eos>"]


def test_build_vocab_frequency_order_and_ties() -> None:
    vocab = build_vocab(["b", "a", "c", "a", "b", "d", UNK, UNK, UNK], 3)
    assert vocab == [UNK, "a", "b"]


def test_builtin_corpus_windows_and_vocab() -> None:
    train, evaluation, vocab = text_datasets(10000, 35)
    assert vocab[0] == UNK and len(vocab) <= 10000 and len(set(vocab)) == len(vocab)
    assert "the" in vocab and "<eos>" in vocab
    assert train.inputs.shape[1] == 35 and train.inputs.dtype == torch.int64
    assert train.inputs.shape == train.targets.shape
    assert len(train) > 2000 and len(evaluation) > 200
    assert torch.equal(train.inputs[:, 1:], train.targets[:, :-1])
    assert int(train.inputs.max()) < len(vocab)


def test_small_vocab_maps_rare_tokens_to_unk() -> None:
    train, evaluation, vocab = text_datasets(50, 10)
    assert len(vocab) == 50
    for split in (train, evaluation):
        assert int(split.inputs.max()) < 50
        assert (split.inputs == 0).float().mean() > 0.2  # many tokens are outside the top 49


def test_user_text_round_trip(tmp_path) -> None:
    path = tmp_path / "corpus.txt"
    words = [f"w{i % 7}" for i in range(400)]
    path.write_text("\n".join(" ".join(words[i:i + 8]) for i in range(0, 400, 8)), "utf-8")
    train, evaluation, vocab = text_datasets(5, 4, str(path))
    assert len(vocab) == 5 and vocab[0] == UNK
    assert set(vocab[1:]) <= {f"w{i}" for i in range(7)} | {"<eos>"}
    assert train.inputs.shape[1:] == (4,) and len(evaluation) >= 1
    assert torch.equal(train.inputs[:, 1:], train.targets[:, :-1])
    assert str(path) in train.description


@pytest.mark.parametrize("name,content,message", [
    ("short.txt", b"just a few words\n", r"short.txt: has 5 tokens; expected at least"),
    ("latin1.txt", "caf\xe9 ".encode("latin-1") * 200, "latin1.txt: not UTF-8 text"),
    ("binary.txt", b"\x00\x01" * 300, "binary.txt: contains NUL bytes"),
])
def test_bad_user_text(tmp_path, name: str, content: bytes, message: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(UsageError, match=message):
        text_datasets(100, 35, str(path))


def test_user_text_file_checks(tmp_path) -> None:
    with pytest.raises(UsageError, match="absent.txt: no such file"):
        text_datasets(100, 35, str(tmp_path / "absent.txt"))
    path = tmp_path / "big.txt"
    path.write_text("word " * 100)
    with pytest.raises(UsageError, match="big.txt: file is 500 bytes, larger than"):
        text_datasets(100, 35, str(path), max_bytes=100)
