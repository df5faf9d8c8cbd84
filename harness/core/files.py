"""Files dtbench writes: atomically (temporary file, then rename or link), and output paths
checked before any work starts."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from harness.core.errors import UsageError

TMP_PREFIX = ".tmp-"


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
