"""Files dtbench writes: atomically (temporary file, then rename or link), and output paths
checked before any work starts."""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path, PurePosixPath

from harness.core.errors import UsageError

TMP_PREFIX = ".tmp-"
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"),
          (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket"))


class RefusedFile(OSError):
    """A file dtbench will not read or write: not a regular file, too large, or (reached
    through a link) outside the folder it was found in."""


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def is_within(path: str | Path, root: str | Path) -> bool:
    """Whether `path`, every link followed, lies under `root` (every link followed)."""
    real, top = os.path.realpath(path), os.path.realpath(root)
    return real == top or real.startswith(top.rstrip(os.sep) + os.sep)


def read_regular(path: str | Path, limit: int, within: str | Path | None = None
                 ) -> tuple[bytes, os.stat_result]:
    """The bytes of a regular file of at most `limit` bytes and its status, both from one
    descriptor. A FIFO, device, socket or directory is refused before it is opened (opening a
    FIFO waits for a writer; a device may never end), a larger file before it is read, and,
    with `within`, a file whose real path lies outside that folder (a link out of a store):
    RefusedFile, whose message says which."""
    if within is not None and not is_within(path, within):
        raise RefusedFile(f"{path}: a link to outside {within}")
    found = os.stat(path)
    if not stat.S_ISREG(found.st_mode):
        raise RefusedFile(f"{path}: {_kind(found.st_mode)}, not a regular file")
    if found.st_size > limit:
        raise RefusedFile(f"{path}: {found.st_size} bytes exceeds the {limit}-byte limit")
    handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0)
                     | getattr(os, "O_CLOEXEC", 0))
    try:
        opened = os.fstat(handle)
        if (opened.st_dev, opened.st_ino) != (found.st_dev, found.st_ino) \
                or not stat.S_ISREG(opened.st_mode):
            raise RefusedFile(f"{path}: replaced while it was opened")
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(handle, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    finally:
        os.close(handle)
    data = b"".join(chunks)
    if len(data) > limit:
        raise RefusedFile(f"{path}: more than the {limit}-byte limit")
    return data, opened


def folder_under(root: Path, relative: str) -> Path:
    """`root`/`relative` (a folder dtbench is about to write into), after checking that it
    stays under `root`: a relative path without `..`, and no part of it an existing symbolic
    link (a link could lead a write anywhere). Made if missing; RefusedFile otherwise."""
    parts = PurePosixPath(relative).parts
    if PurePosixPath(relative).is_absolute() or any(part in ("..", ".", "") for part in parts):
        raise RefusedFile(f"{relative}: not a folder under {root}")
    root.mkdir(parents=True, exist_ok=True)
    folder = root
    for part in parts:
        folder = folder / part
        if folder.is_symlink():
            raise RefusedFile(f"{folder}: a symbolic link; dtbench writes only into real "
                              f"folders under {root}")
        folder.mkdir(exist_ok=True)
    return folder


def cache_dir() -> Path:
    """Where dtbench keeps what it measured about this machine (peaks, compile choices,
    memory estimates): DTBENCH_CACHE_DIR, else $XDG_CACHE_HOME/dtbench or ~/.cache/dtbench."""
    root = os.environ.get("DTBENCH_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "dtbench")
    return Path(root)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path: Path, text: str, exclusive: bool = False, durable: bool = True) -> None:
    """Write via a temporary file in the same directory and a rename (or link, if exclusive).

    With exclusive=True an existing file is never replaced: FileExistsError is raised. With
    durable=False the data is not forced to disk first (progress files that are rewritten
    every second need atomicity, not durability).
    """
    handle, tmp_name = tempfile.mkstemp(prefix=TMP_PREFIX, suffix=".json", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        os.fchmod(handle, 0o666 & ~_umask())  # as an ordinary file would be, not mkstemp's 0600
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            if durable:
                os.fsync(stream.fileno())
        if exclusive:
            os.link(tmp, path)
        else:
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def check_output_file(path: str, option: str) -> Path:
    """An output file named on the command line, before any work: not a directory, in a
    directory that exists and takes files; UsageError naming `option` otherwise."""
    target = Path(path)
    if target.is_dir():
        raise UsageError(f"{option} {path}: is a directory; name a file")
    folder = target.parent
    if not folder.is_dir():
        raise UsageError(f"{option} {path}: directory {folder} does not exist")
    try:
        handle, probe = tempfile.mkstemp(prefix=TMP_PREFIX, dir=folder)
        os.close(handle)
        os.unlink(probe)
    except OSError as exc:
        raise UsageError(f"{option} {path}: cannot write in {folder} "
                         f"({exc.strerror or exc})") from None
    return target
