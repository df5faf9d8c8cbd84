"""Real data for time-to-train runs: built-in small sets and the user's `--data` files.

Image workloads get scikit-learn's bundled digits (no download) or the user's `.npz` arrays
(or HDF5 in the old `images`/`labels` layout, read with a deprecation note: HDF5's one layout
is `data`/`label`, read by workloads/files as `dtbench data make` writes it); the language
model gets English text shipped with Python (the documentation topics in `pydoc_data`) or the
user's UTF-8 text. Every builder returns `(train, eval)` splits as in-memory `Dataset`s. User
files are validated up front and every problem is a one-line `UsageError` naming the file and
what was expected.
"""
from __future__ import annotations

import functools
import os
import re
import sys
import zipfile
from collections import Counter
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from harness.core.errors import UsageError
from workloads.base import Dataset
from workloads.files.formats import HDF5_KEYS

IMAGE_EXTENSIONS = (".npz", ".h5", ".hdf5")
IMAGE_NAMES = ("images", "x")
LABEL_NAMES = ("labels", "y")
EVAL_IMAGE_NAME = "eval_images"
EVAL_LABEL_NAME = "eval_labels"
HOLDOUT_FRACTION = 0.2
UNK = "<unk>"
EOS = "<eos>"
MIN_TRAIN_WINDOWS = 4
_TOKEN = re.compile(r"<unk>|<eos>|\w+(?:['’]\w+)*|[^\w\s]")
_DECORATION_LINE = re.compile(r"^[\W_]+$")
_PUNCTUATION_RUN = re.compile(r"([^\w\s])\1{2,}")
_EMPHASIS = re.compile(r"(?<![\w*])\*(\w[^*]*?)\*(?![\w*])")


# ---------------------------------------------------------------- built-in images

@functools.lru_cache(maxsize=1)
def _digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    digits = load_digits()
    return digits.images.astype(np.float32), digits.target.astype(np.int64)


def digits_images(image_size: int, channels: int = 3, seed: int = 0,
                  eval_fraction: float = 0.2) -> tuple[Dataset, Dataset]:
    """scikit-learn's 8x8 digits, upsampled to image_size, normalised with train statistics."""
    if image_size < 1 or channels < 1 or not 0.0 < eval_fraction < 1.0:
        raise UsageError(f"digits: need image_size >= 1, channels >= 1 and 0 < eval_fraction < 1, "
                         f"got {image_size}, {channels}, {eval_fraction}")
    images, labels = _digits_arrays()
    rng = np.random.default_rng(seed)
    train_index, eval_index = [], []
    for digit in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == digit))
        n_eval = max(1, round(eval_fraction * len(members)))
        eval_index.append(members[:n_eval])
        train_index.append(members[n_eval:])
    splits = [rng.permutation(np.concatenate(index)) for index in (train_index, eval_index)]

    pixels = torch.from_numpy(images).unsqueeze(1)
    if image_size != pixels.shape[-1]:
        pixels = F.interpolate(pixels, size=(image_size, image_size), mode="bilinear",
                               align_corners=False)
    train_pixels = pixels[torch.from_numpy(splits[0])]
    mean, std = train_pixels.mean(), train_pixels.std().clamp_min(1e-6)
    out = []
    for name, index in zip(("train", "eval"), splits, strict=True):
        index_t = torch.from_numpy(index)
        inputs = ((pixels[index_t] - mean) / std).repeat(1, channels, 1, 1).contiguous()
        out.append(Dataset(inputs, torch.from_numpy(labels[index]),
                           f"sklearn digits {name} split ({len(index)} images, 8x8 -> "
                           f"{image_size}x{image_size}x{channels}, seed {seed})"))
    return out[0], out[1]


# ---------------------------------------------------------------- user image arrays

def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def _check_file(path: str, max_bytes: int, kind: str) -> int:
    """Fail early on a path that is missing, not a readable file, or too large."""
    if not os.path.exists(path):
        raise UsageError(f"--data {path}: no such file; expected {kind}")
    if not os.path.isfile(path):
        raise UsageError(f"--data {path}: not a regular file; expected {kind}")
    size = os.path.getsize(path)
    if size > max_bytes:
        raise UsageError(f"--data {path}: file is {size:,} bytes, larger than the "
                         f"{max_bytes:,}-byte limit; use a smaller {kind}")
    try:
        with open(path, "rb") as handle:
            handle.read(1)
    except OSError as error:
        raise UsageError(f"--data {path}: cannot read the file ({_one_line(error)})") from None
    return size


def _npz_reader(path: str, max_bytes: int) -> tuple[list[str], Callable[[str], np.ndarray]]:
    """Array names and a loader, reading headers first so object arrays are never unpickled."""
    bad = f"--data {path}: not a valid .npz archive"
    try:
        with zipfile.ZipFile(path) as archive:
            members = {info.filename[:-4]: info for info in archive.infolist()
                       if info.filename.endswith(".npy")}
            total = sum(info.file_size for info in members.values())
            if total > max_bytes:
                raise UsageError(f"--data {path}: arrays decompress to {total:,} bytes, more "
                                 f"than the {max_bytes:,}-byte limit; use smaller arrays")
    except (zipfile.BadZipFile, OSError, EOFError) as error:
        raise UsageError(f"{bad} ({_one_line(error)}); expected np.savez output with arrays "
                         f"'images' and 'labels'") from None
    if not members:
        raise UsageError(f"{bad} (it holds no .npy arrays); expected np.savez output with "
                         f"arrays 'images' and 'labels'")

    def load(name: str) -> np.ndarray:
        try:
            with zipfile.ZipFile(path) as archive, archive.open(members[name]) as member:
                version = np.lib.format.read_magic(member)
                if version in ((1, 0), (2, 0)):
                    read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                                   else np.lib.format.read_array_header_2_0)
                    dtype = read_header(member)[2]
                    if dtype.hasobject:
                        raise UsageError(f"--data {path}: array {name!r} has object dtype "
                                         f"(pickled data is never loaded); expected a numeric "
                                         f"array")
            with np.load(path, allow_pickle=False) as npz:
                return npz[name]
        except UsageError:
            raise
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, KeyError) as error:
            raise UsageError(f"{bad}: cannot read array {name!r} ({_one_line(error)})") from None

    return sorted(members), load


@functools.cache
def old_hdf5_layout_note(path: str) -> str:
    """The deprecation note of an HDF5 file in the old layout, printed once per file and
    process (the command's preflight shows it; ranks print theirs into their logs)."""
    note = (f"dtbench: note: --data {path}: HDF5 datasets 'images'/'labels' are the old "
            f"layout, still read whole for time-to-train runs; write '{HDF5_KEYS[0]}' "
            f"(N, C, H, W) and '{HDF5_KEYS[1]}' (N) instead, the layout `dtbench data make "
            f"--format hdf5` writes, read a sample at a time in throughput runs too")
    print(note, file=sys.stderr)
    return note


def _hdf5_reader(path: str, max_bytes: int) -> tuple[list[str], Callable[[str], np.ndarray]]:
    """Root-level dataset names and a loader, checking sizes and dtypes before reading (the old
    layout: a file of `data`/`label` is read by workloads/files)."""
    import h5py

    try:
        with h5py.File(path, "r") as handle:
            shapes = {name: (item.dtype, item.size or 0) for name, item in handle.items()
                      if isinstance(item, h5py.Dataset)}
    except (OSError, ValueError) as error:
        raise UsageError(f"--data {path}: not a valid HDF5 file ({_one_line(error)}); expected "
                         f"datasets 'images' and 'labels' at the root") from None
    total = sum(dtype.itemsize * size for dtype, size in shapes.values())
    if total > max_bytes:
        raise UsageError(f"--data {path}: datasets hold {total:,} bytes, more than the "
                         f"{max_bytes:,}-byte limit; use smaller arrays")

    def load(name: str) -> np.ndarray:
        if shapes[name][0].hasobject or shapes[name][0].kind in "OSUV":
            raise UsageError(f"--data {path}: dataset {name!r} has dtype {shapes[name][0]}; "
                             f"expected a numeric array")
        try:
            with h5py.File(path, "r") as handle:
                if handle[name].shape is None:  # an HDF5 null dataspace holds no data
                    return np.empty((0,), dtype=shapes[name][0])
                return np.asarray(handle[name][()])
        except (OSError, ValueError, TypeError) as error:
            raise UsageError(f"--data {path}: cannot read dataset {name!r} "
                             f"({_one_line(error)})") from None

    return sorted(shapes), load


def _pick(path: str, names: list[str], wanted: tuple[str, ...]) -> str:
    for name in wanted:
        if name in names:
            return name
    found = ", ".join(repr(name) for name in names) or "none"
    raise UsageError(f"--data {path}: no array named {' or '.join(map(repr, wanted))} "
                     f"(found: {found}); expected 'images' and 'labels'")


def _images_tensor(path: str, name: str, array: np.ndarray, image_size: int | None,
                   channels: int) -> torch.Tensor:
    """Validated float32 NCHW images: uint8 scaled to [0, 1], channels and size matched."""
    where = f"--data {path}: array {name!r}"
    if array.dtype.hasobject:
        raise UsageError(f"{where} has object dtype; expected a numeric array")
    if array.dtype.kind not in "uif":
        raise UsageError(f"{where} has dtype {array.dtype}; expected uint8 or float images")
    if array.ndim not in (3, 4):
        raise UsageError(f"{where} has shape {array.shape}; expected (N,H,W), (N,C,H,W) "
                         f"or (N,H,W,C)")
    if array.size == 0:
        raise UsageError(f"{where} is empty (shape {array.shape}); expected at least one image")
    if array.ndim == 3:
        array = array[:, None]
    elif array.shape[-1] in (1, 3) and array.shape[1] not in (1, 3):
        array = array.transpose(0, 3, 1, 2)
    if array.dtype == np.uint8:
        images = torch.from_numpy(np.ascontiguousarray(array)).float().div_(255.0)
    else:
        images = torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32))
        if not torch.isfinite(images).all():
            raise UsageError(f"{where} contains NaN or infinite values; expected finite pixels")
    found = images.shape[1]
    if found != channels:
        if found != 1:
            raise UsageError(f"{where} has {found} channels (shape {tuple(images.shape)} as "
                             f"NCHW); expected {channels} (or 1, which is repeated)")
        images = images.expand(-1, channels, -1, -1)
    if image_size is not None and tuple(images.shape[-2:]) != (image_size, image_size):
        shrinking = min(images.shape[-2:]) > image_size
        images = F.interpolate(images, size=(image_size, image_size), mode="bilinear",
                               align_corners=False, antialias=shrinking)
    return images.contiguous()


def _labels_tensor(path: str, name: str, array: np.ndarray, n_images: int,
                   num_classes: int) -> torch.Tensor:
    """Validated int64 class indices, one per image, in [0, num_classes)."""
    where = f"--data {path}: array {name!r}"
    if array.dtype.hasobject:
        raise UsageError(f"{where} has object dtype; expected integer class indices")
    if array.dtype.kind not in "ui":
        raise UsageError(f"{where} has dtype {array.dtype}; expected integer class indices")
    if array.ndim != 1:
        raise UsageError(f"{where} has shape {array.shape}; expected a 1-D array of N labels")
    if array.size == 0:
        raise UsageError(f"{where} is empty; expected one label per image")
    if array.shape[0] != n_images:
        raise UsageError(f"{where} has {array.shape[0]} labels but there are {n_images} "
                         f"images; expected one label per image")
    low, high = int(array.min()), int(array.max())
    if low < 0 or high >= num_classes:
        raise UsageError(f"{where} has labels in [{low}, {high}]; expected class indices in "
                         f"[0, {num_classes - 1}]")
    return torch.from_numpy(array.astype(np.int64))


def load_image_arrays(path: str, image_size: int | None, channels: int, num_classes: int,
                      max_bytes: int = 2**31) -> tuple[Dataset, Dataset]:
    """The user's `.npz`/HDF5 images and labels as (train, eval); eval is held out if absent."""
    extension = os.path.splitext(path)[1].lower()
    if extension not in IMAGE_EXTENSIONS:
        raise UsageError(f"--data {path}: unknown extension {extension or '(none)'!r}; "
                         f"expected one of {', '.join(IMAGE_EXTENSIONS)}")
    _check_file(path, max_bytes, "an .npz or HDF5 file of images and labels")
    reader = _npz_reader if extension == ".npz" else _hdf5_reader
    names, load = reader(path, max_bytes)
    image_name = _pick(path, names, IMAGE_NAMES)
    label_name = _pick(path, names, LABEL_NAMES)
    if reader is _hdf5_reader:
        old_hdf5_layout_note(path)
    images = _images_tensor(path, image_name, load(image_name), image_size, channels)
    labels = _labels_tensor(path, label_name, load(label_name), len(images), num_classes)

    has_eval = (EVAL_IMAGE_NAME in names, EVAL_LABEL_NAME in names)
    if any(has_eval) and not all(has_eval):
        raise UsageError(f"--data {path}: has only one of {EVAL_IMAGE_NAME!r} and "
                         f"{EVAL_LABEL_NAME!r}; expected both or neither")
    source = os.path.basename(path)
    if all(has_eval):
        eval_images = _images_tensor(path, EVAL_IMAGE_NAME, load(EVAL_IMAGE_NAME),
                                     image_size, channels)
        if eval_images.shape[1:] != images.shape[1:]:
            raise UsageError(f"--data {path}: {EVAL_IMAGE_NAME!r} images are "
                             f"{tuple(eval_images.shape[1:])}, training images are "
                             f"{tuple(images.shape[1:])}; expected the same shape")
        eval_labels = _labels_tensor(path, EVAL_LABEL_NAME, load(EVAL_LABEL_NAME),
                                     len(eval_images), num_classes)
        return (Dataset(images, labels, f"{source}: {len(images)} training images"),
                Dataset(eval_images, eval_labels, f"{source}: {len(eval_images)} eval images"))
    if len(images) < 2:
        raise UsageError(f"--data {path}: has {len(images)} image; expected at least 2 so "
                         f"that {HOLDOUT_FRACTION:.0%} can be held out for evaluation")
    order = torch.randperm(len(images), generator=torch.Generator().manual_seed(0))
    n_eval = max(1, round(HOLDOUT_FRACTION * len(images)))
    eval_index, train_index = order[:n_eval], order[n_eval:]
    return (Dataset(images[train_index], labels[train_index],
                    f"{source}: {len(train_index)} training images"),
            Dataset(images[eval_index], labels[eval_index],
                    f"{source}: {n_eval} held-out eval images ({HOLDOUT_FRACTION:.0%})"))


# ---------------------------------------------------------------- text

@functools.lru_cache(maxsize=1)
def builtin_text() -> str:
    """Python's documentation topics (`pydoc_data`), one paragraph per line, markup stripped."""
    from pydoc_data.topics import topics

    paragraphs: list[str] = []
    for key in sorted(topics):
        for block in re.split(r"\n\s*\n", topics[key]):
            lines = [line.strip() for line in block.splitlines()
                     if line.strip() and not _DECORATION_LINE.match(line.strip())]
            if lines:
                paragraph = _PUNCTUATION_RUN.sub(" ", " ".join(lines))
                paragraphs.append(_EMPHASIS.sub(r"\1", paragraph))
    return "\n".join(paragraphs)


def tokenize(text: str) -> list[str]:
    """Lowercased words and single punctuation marks; each non-blank line ends with `<eos>`."""
    tokens: list[str] = []
    for line in text.lower().splitlines():
        words = _TOKEN.findall(line)
        if words:
            tokens.extend(words)
            tokens.append(EOS)
    return tokens


def build_vocab(tokens: list[str], vocab_size: int) -> list[str]:
    """`<unk>` then the vocab_size - 1 most frequent tokens (ties broken alphabetically)."""
    counts = Counter(token for token in tokens if token != UNK)
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return [UNK] + [token for token, _ in ranked[:vocab_size - 1]]


def _read_text(path: str, max_bytes: int) -> str:
    _check_file(path, max_bytes, "a UTF-8 plain-text file")
    with open(path, "rb") as handle:
        raw = handle.read()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise UsageError(f"--data {path}: not UTF-8 text (invalid byte at offset "
                         f"{error.start}); expected a UTF-8 plain-text file") from None
    if "\x00" in text:
        raise UsageError(f"--data {path}: contains NUL bytes, so it looks binary; expected a "
                         f"UTF-8 plain-text file")
    return text


def _enough_tokens(n_tokens: int, window: int, eval_fraction: float) -> bool:
    n_eval = int(n_tokens * eval_fraction)
    return n_eval >= window and n_tokens - n_eval >= MIN_TRAIN_WINDOWS * window


def _windows(ids: torch.Tensor, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    n = len(ids) // (seq_len + 1)
    windows = ids[:n * (seq_len + 1)].view(n, seq_len + 1)
    return windows[:, :-1].contiguous(), windows[:, 1:].contiguous()


def text_datasets(vocab_size: int, seq_len: int, data_path: str | None = None,
                  eval_fraction: float = 0.1, max_bytes: int = 2**28,
                  ) -> tuple[Dataset, Dataset, list[str]]:
    """Word-level language-model windows (inputs, next-token targets) and the vocabulary."""
    if vocab_size < 2 or seq_len < 1 or not 0.0 < eval_fraction < 1.0:
        raise UsageError(f"text data: need vocab_size >= 2, seq_len >= 1 and "
                         f"0 < eval_fraction < 1, got {vocab_size}, {seq_len}, {eval_fraction}")
    if data_path is None:
        source, tokens = "Python documentation topics (pydoc_data)", tokenize(builtin_text())
    else:
        source, tokens = data_path, tokenize(_read_text(data_path, max_bytes))
    window = seq_len + 1
    n_eval = int(len(tokens) * eval_fraction)
    if not _enough_tokens(len(tokens), window, eval_fraction):
        start = int(max(window / eval_fraction, MIN_TRAIN_WINDOWS * window / (1 - eval_fraction)))
        needed = next(n for n in range(max(1, start - 2), start + window + 10)
                      if _enough_tokens(n, window, eval_fraction))
        where = f"--data {data_path}" if data_path is not None else source
        raise UsageError(f"{where}: has {len(tokens)} tokens; expected at least {needed} for "
                         f"{MIN_TRAIN_WINDOWS} training and 1 eval sequence of {seq_len} tokens "
                         f"with eval fraction {eval_fraction}")
    train_tokens, eval_tokens = tokens[:len(tokens) - n_eval], tokens[len(tokens) - n_eval:]
    vocab = build_vocab(train_tokens, vocab_size)
    index = {token: i for i, token in enumerate(vocab)}
    unk = index[UNK]
    out = []
    for name, part in (("train", train_tokens), ("eval", eval_tokens)):
        ids = torch.tensor([index.get(token, unk) for token in part], dtype=torch.int64)
        inputs, targets = _windows(ids, seq_len)
        out.append(Dataset(inputs, targets,
                           f"{source} {name}: {len(part)} tokens, {len(inputs)} windows of "
                           f"{seq_len}, vocabulary {len(vocab)}"))
    return out[0], out[1], vocab
