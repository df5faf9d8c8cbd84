"""`dtbench data make`: a dataset of a workload's shape in each format, since nothing can be
downloaded here. Images are real JPEG encodings of textured pictures a little larger than the
workload's crop (ImageNet's are resized to 256 for a 224 crop; quality 90 gives file sizes
like photographs of that size), so that reading, decoding and augmenting cost what they cost
with real photographs. HEP CNN arrays go to chunked HDF5 (one chunk a sample), token ids to
an int32 file: a workload's own text where it has one (gpt's tokenized built-in text), else
random ids. Everything is written beside the target and moved into place when complete.
"""
from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path

import numpy as np

from harness.core.errors import UsageError
from workloads.files.formats import FORMATS, HDF5_KEYS, TOKENS_FILE

JPEG_QUALITY = 90
ENLARGE = 256 / 224  # a stored image's side over the crop's
SHARD_SAMPLES = 1000  # samples per tar shard (WebDataset's shards hold thousands)
MAKE_CLASSES = 10  # class folders an image dataset gets (at most the workload's classes)


def _picture(rng: np.random.Generator, side: int, label: int) -> np.ndarray:
    """An RGB uint8 picture with photographic texture: smooth colour fields of a few random
    waves (the class's own frequency) plus fine grain, which JPEG cannot compress to nothing."""
    y, x = np.mgrid[0:side, 0:side].astype(np.float32) / side
    picture = np.zeros((side, side, 3), np.float32)
    for channel in range(3):
        for _ in range(4):
            fx, fy = rng.uniform(0.5, 6 + label, 2)
            phase = rng.uniform(0, 2 * np.pi)
            picture[..., channel] += np.sin(2 * np.pi * (fx * x + fy * y) + phase)
    picture = (picture - picture.min()) / max(float(np.ptp(picture)), 1e-6) * 200 + 20
    picture += rng.normal(0, 12, picture.shape)
    return np.clip(picture, 0, 255).astype(np.uint8)


def _jpeg(picture: np.ndarray) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(picture).save(buffer, format="JPEG", quality=JPEG_QUALITY)
    return buffer.getvalue()


def make_dataset(fmt: str, out: str, *, samples: int, shape: tuple[int, ...],
                 num_classes: int, seed: int = 0,
                 text_ids: np.ndarray | None = None) -> dict[str, object]:
    """Write `samples` samples of `shape` in `fmt` to `out` (which must not exist); returns
    what was written (format, samples, bytes, classes). Tokens are `text_ids` (a real text's,
    repeated from its start where more are asked for) where given, else random ids."""
    if fmt not in FORMATS:
        raise UsageError(f"--format {fmt}: choose from {', '.join(FORMATS)}")
    if samples < 1:
        raise UsageError("--samples must be at least 1")
    target = Path(out)
    if target.exists():
        raise UsageError(f"-o {out}: exists; name a new folder")
    staging = target.with_name(f".{target.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    classes = min(num_classes, MAKE_CLASSES)
    labels = [i % classes for i in range(samples)]
    try:
        if fmt == "imagefolder":
            side = round(shape[-1] * ENLARGE)
            for index, label in enumerate(labels):
                folder = staging / f"class_{label:03d}"
                folder.mkdir(exist_ok=True)
                (folder / f"{index:07d}.jpg").write_bytes(_jpeg(_picture(rng, side, label)))
        elif fmt == "webdataset":
            side = round(shape[-1] * ENLARGE)
            for first in range(0, samples, SHARD_SAMPLES):
                with tarfile.open(staging / f"shard-{first // SHARD_SAMPLES:06d}.tar", "w") as tar:
                    for index in range(first, min(samples, first + SHARD_SAMPLES)):
                        image = _jpeg(_picture(rng, side, labels[index]))
                        _add(tar, f"{index:07d}.jpg", image)
                        _add(tar, f"{index:07d}.cls", str(labels[index]).encode())
        elif fmt == "hdf5":
            import h5py

            with h5py.File(staging / "data.h5", "w") as handle:
                data = handle.create_dataset(HDF5_KEYS[0], (samples, *shape), dtype="f4",
                                             chunks=(1, *shape))
                for index, label in enumerate(labels):
                    data[index] = rng.normal(0.1 * label, 1.0, shape).astype(np.float32)
                handle.create_dataset(HDF5_KEYS[1], data=np.asarray(labels, dtype="i8"))
        else:
            count = samples * shape[0] + 1
            ids = (rng.zipf(1.3, count) % num_classes if text_ids is None
                   else np.resize(text_ids, count))
            ids.astype("<i4").tofile(staging / TOKENS_FILE)
            classes = num_classes
        size = sum(p.stat().st_size for p in staging.rglob("*") if p.is_file())
        summary = {"format": fmt, "samples": samples, "bytes": size, "classes": classes,
                   "sample_shape": list(shape), "seed": seed,
                   "content": "generated" if text_ids is None or fmt != "tokens" else
                   f"text ({len(text_ids):,} token ids, repeated to fill)"}
        (staging / "dtbench-dataset.json").write_text(json.dumps(summary, indent=1) + "\n")
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return summary


def _add(tar: tarfile.TarFile, name: str, payload: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(payload)
    tar.addfile(info, io.BytesIO(payload))
