"""Datasets in the formats users keep them in, read one sample at a time.

- imagefolder: class sub-folders of JPEG/PNG files (torchvision's ImageFolder layout);
- webdataset: tar shards whose samples are files sharing a basename (KEY.jpg + KEY.cls);
- hdf5: one file with `data` (N, C, H, W) and `label` (N) datasets, read by chunk (the HEP
  CNN's native format), never loaded whole;
- tokens: a `tokens.bin` of little-endian int32 token ids (memory-mapped), cut into windows.

Each source is opened and checked up front (every problem a one-line UsageError naming the
file), knows its length, and reads sample i as (payload, label) where the payload is encoded
image bytes, an array or a token window. A file that turns out bad while reading raises
BadSample naming the file and the sample. Sources are picklable, so loader workers get them,
and open their files lazily in each process (an HDF5 handle must not cross a fork).
"""
from __future__ import annotations

import os
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.core.errors import RunFailed, UsageError

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
FORMATS = ("imagefolder", "webdataset", "hdf5", "tokens")
TOKENS_FILE = "tokens.bin"
# HDF5's one layout, the one `dtbench data make` writes: `data` (N, C, H, W), `label` (N)
HDF5_KEYS = ("data", "label")


class BadSample(RunFailed):
    """One sample cannot be read or decoded: names the file and the sample (the run fails
    with this line, unless it skips bad samples)."""


def detect(path: str) -> str:
    """The format of a dataset path, or UsageError naming what was found."""
    target = Path(path)
    if not target.exists():
        raise UsageError(f"--data {path}: no such file or directory")
    if target.is_file():
        if target.suffix in (".h5", ".hdf5"):
            # `data` and `label` (HDF5's one layout) are read by chunk; a file of the old
            # layout, `images`/`x` arrays, is loaded whole by time-to-train runs with a
            # deprecation note (workloads/data.py)
            return "arrays" if _arrays_file(target) else "hdf5"
        if target.suffix == ".tar":
            return "webdataset"
        if target.name == TOKENS_FILE or target.suffix == ".bin":
            return "tokens"
        if target.suffix in (".npz",):
            return "arrays"
        raise UsageError(f"--data {path}: not a dataset file (.h5/.hdf5, .tar, tokens .bin, "
                         ".npz, or a folder)")
    if (target / TOKENS_FILE).is_file():
        return "tokens"
    if hdf5_file(target) is not None:
        return "hdf5"
    if any(target.glob("*.tar")):
        return "webdataset"
    if any(child.is_dir() for child in target.iterdir()):
        return "imagefolder"
    raise UsageError(f"--data {path}: an empty folder or one without class sub-folders, tar "
                     f"shards or {TOKENS_FILE}")


def _arrays_file(path: Path) -> bool:
    """An HDF5 file in the old layout, whole arrays (`images` or `x`, no `data`): read by
    workloads/data.py."""
    import h5py

    try:
        with h5py.File(path, "r") as handle:
            return HDF5_KEYS[0] not in handle and any(k in handle for k in ("images", "x"))
    except OSError:
        return False  # not readable: the HDF5 reader says why


def hdf5_file(folder: Path) -> Path | None:
    """The one .h5/.hdf5 file of a folder (`data make` writes data.h5), or None."""
    found = sorted([*folder.glob("*.h5"), *folder.glob("*.hdf5")])
    return found[0] if len(found) == 1 else None


@dataclass
class ImageFolder:
    """Class sub-folders of images, sorted by name; the class is the folder's index."""

    root: str
    classes: list[str] = field(default_factory=list)
    files: list[tuple[str, int]] = field(default_factory=list)
    kind: str = "image"

    def open(self, num_classes: int) -> ImageFolder:
        stray = sorted(p.name for p in Path(self.root).iterdir()
                       if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
        if stray:
            raise UsageError(f"--data {self.root}: {len(stray)} image(s) outside the class "
                             f"folders (e.g. {stray[0]}); each image belongs in its class's "
                             "folder")
        folders = sorted(p for p in Path(self.root).iterdir() if p.is_dir())
        if len(folders) < 2:
            raise UsageError(f"--data {self.root}: {len(folders)} class folder(s); a "
                             "classification dataset needs at least 2")
        if len(folders) > num_classes:
            raise UsageError(f"--data {self.root}: {len(folders)} class folders, more than the "
                             f"workload's {num_classes} classes")
        for index, folder in enumerate(folders):
            images = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
            if not images:
                raise UsageError(f"--data {self.root}: class folder {folder.name} has no "
                                 f"{'/'.join(IMAGE_SUFFIXES)} images")
            self.files += [(str(image), index) for image in images]
        self.classes = [folder.name for folder in folders]
        return self

    def __len__(self) -> int:
        return len(self.files)

    def class_counts(self) -> dict[str, int]:
        """Images per class folder (an unbalanced dataset shows here, in the record)."""
        counts = dict.fromkeys(self.classes, 0)
        for _, label in self.files:
            counts[self.classes[label]] += 1
        return counts

    def name(self, index: int) -> str:
        return self.files[index][0]

    def read(self, index: int) -> tuple[bytes, int]:
        path, label = self.files[index]
        try:
            return Path(path).read_bytes(), label
        except OSError as exc:
            raise BadSample(f"{path}: cannot read ({exc.strerror or exc})") from None


@dataclass
class TarShards:
    """WebDataset tar shards: each sample KEY.jpg/.png (or .npy) with KEY.cls, indexed once
    by the members' offsets so that any sample is one seek."""

    root: str
    samples: list[tuple[str, str, int, int, int]] = field(default_factory=list)
    kind: str = "image"

    def open(self, num_classes: int) -> TarShards:
        target = Path(self.root)
        shards = [target] if target.is_file() else sorted(target.glob("*.tar"))
        for shard in shards:
            self.samples += _index_shard(shard, num_classes)
        if not self.samples:
            raise UsageError(f"--data {self.root}: no samples (KEY.jpg with KEY.cls) in "
                             f"{len(shards)} shard(s)")
        return self

    def __len__(self) -> int:
        return len(self.samples)

    def name(self, index: int) -> str:
        shard, key, *_ = self.samples[index]
        return f"{shard} sample {key}"

    def read(self, index: int) -> tuple[bytes, int]:
        shard, key, offset, size, label = self.samples[index]
        try:
            with open(shard, "rb") as handle:
                handle.seek(offset)
                payload = handle.read(size)
        except OSError as exc:
            raise BadSample(f"{shard} sample {key}: cannot read ({exc.strerror or exc})") from None
        if len(payload) != size:
            raise BadSample(f"{shard} sample {key}: the shard ends inside the sample "
                            "(truncated)")
        return payload, label


def _index_shard(shard: Path, num_classes: int) -> list[tuple[str, str, int, int, int]]:
    images: dict[str, tuple[int, int]] = {}
    labels: dict[str, int] = {}
    try:
        with tarfile.open(shard, "r:") as archive:
            for member in archive:
                if not member.isfile():
                    continue
                key, _, suffix = member.name.rpartition(".")
                if "." + suffix.lower() in IMAGE_SUFFIXES:
                    images[key] = (member.offset_data, member.size)
                elif suffix == "cls":
                    text = archive.extractfile(member).read().decode().strip()  # type: ignore[union-attr]
                    labels[key] = _label(shard, key, text, num_classes)
    except (tarfile.TarError, EOFError, OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--data {shard}: not a readable tar shard ({exc}); truncated or "
                         "corrupt") from None
    size = shard.stat().st_size
    found = []
    for key, (offset, length) in images.items():
        if key not in labels:
            raise UsageError(f"--data {shard}: sample {key} has no {key}.cls label")
        if offset + length > size:
            raise UsageError(f"--data {shard}: sample {key} runs past the end of the shard "
                             "(truncated)")
        found.append((str(shard), key, offset, length, labels[key]))
    return sorted(found, key=lambda item: item[1])


def _label(shard: Path, key: str, text: str, num_classes: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"--data {shard}: sample {key}'s label {text!r} is not a class "
                         "index") from None
    if not 0 <= value < num_classes:
        raise UsageError(f"--data {shard}: sample {key}'s label {value} is outside "
                         f"[0, {num_classes})")
    return value


@dataclass
class Hdf5Arrays:
    """`data` (N, C, H, W) float and `label` (N) integer datasets of one HDF5 file, read a
    sample (a chunk) at a time through a handle each process opens for itself."""

    root: str
    length: int = 0
    kind: str = "array"
    _handle: Any = None
    _pid: int = -1

    def open(self, num_classes: int, shape: tuple[int, ...] = ()) -> Hdf5Arrays:
        import h5py

        try:
            with h5py.File(self.root, "r") as handle:
                missing = [key for key in HDF5_KEYS if key not in handle]
                if missing:
                    raise UsageError(f"--data {self.root}: no dataset {missing[0]!r} (found "
                                     f"{', '.join(sorted(handle.keys())) or 'none'}); expected "
                                     f"{' and '.join(HDF5_KEYS)}")
                data, label = handle["data"], handle["label"]
                if shape and tuple(data.shape[1:]) != tuple(shape):
                    raise UsageError(f"--data {self.root}: data has samples of shape "
                                     f"{tuple(data.shape[1:])}; the workload takes {tuple(shape)}")
                if label.shape != (data.shape[0],):
                    raise UsageError(f"--data {self.root}: label has shape {label.shape} for "
                                     f"{data.shape[0]} samples; expected ({data.shape[0]},)")
                self.length = int(data.shape[0])
        except OSError as exc:
            raise UsageError(f"--data {self.root}: not a readable HDF5 file ({exc})") from None
        if self.length == 0:
            raise UsageError(f"--data {self.root}: no samples")
        return self

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_handle": None, "_pid": -1}

    def __len__(self) -> int:
        return self.length

    def name(self, index: int) -> str:
        return f"{self.root} sample {index}"

    def read(self, index: int) -> tuple[np.ndarray, int]:
        import h5py

        if self._handle is None or self._pid != os.getpid():
            self._handle, self._pid = h5py.File(self.root, "r"), os.getpid()
        try:
            return (np.asarray(self._handle["data"][index], dtype=np.float32),
                    int(self._handle["label"][index]))
        except (OSError, ValueError, KeyError) as exc:
            raise BadSample(f"{self.root} sample {index}: cannot read ({exc})") from None


@dataclass
class Tokens:
    """int32 token ids, memory-mapped; sample i is the window [i·L, (i+1)·L] (L + 1 ids)."""

    root: str
    window: int = 0
    length: int = 0
    kind: str = "tokens"

    def open(self, vocabulary: int, window: int) -> Tokens:
        path = Path(self.root)
        path = path / TOKENS_FILE if path.is_dir() else path
        self.root = str(path)
        if path.stat().st_size % 4:
            raise UsageError(f"--data {path}: {path.stat().st_size} bytes is not a whole number "
                             "of int32 token ids (truncated?)")
        ids = np.memmap(path, dtype="<i4", mode="r")
        self.window = window
        self.length = max(0, (len(ids) - 1) // window)
        if self.length == 0:
            raise UsageError(f"--data {path}: {len(ids)} token ids, fewer than one window of "
                             f"{window + 1}")
        low, high = int(ids.min()), int(ids.max())
        if low < 0 or high >= vocabulary:
            raise UsageError(f"--data {path}: token ids in [{low}, {high}]; the workload's "
                             f"vocabulary is [0, {vocabulary})")
        return self

    def __len__(self) -> int:
        return self.length

    def name(self, index: int) -> str:
        return f"{self.root} window {index}"

    def read(self, index: int) -> tuple[np.ndarray, int]:
        ids = np.memmap(self.root, dtype="<i4", mode="r")
        start = index * self.window
        return np.array(ids[start:start + self.window + 1], dtype=np.int64), 0


Source = ImageFolder | TarShards | Hdf5Arrays | Tokens


def open_source(path: str, *, num_classes: int, shape: tuple[int, ...], tokens: bool
                ) -> tuple[str, Source]:
    """(format, checked source) of a dataset path for a workload with `num_classes` classes
    (the vocabulary for tokens) and samples of `shape` (a token window's length)."""
    found = detect(path)
    if tokens != (found == "tokens"):
        wanted = "a tokens file" if tokens else "images (a class folder, tar shards or HDF5)"
        raise UsageError(f"--data {path}: a {found} dataset; this workload reads {wanted}")
    if found == "imagefolder":
        return found, ImageFolder(path).open(num_classes)
    if found == "webdataset":
        return found, TarShards(path).open(num_classes)
    if found == "hdf5":
        file = hdf5_file(Path(path)) if Path(path).is_dir() else Path(path)
        return found, Hdf5Arrays(str(file)).open(num_classes, shape)
    if found == "tokens":
        return found, Tokens(path).open(num_classes, shape[0])
    raise UsageError(f"--data {path}: .npz arrays are read whole by time-to-train runs only")
