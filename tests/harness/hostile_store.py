"""A hostile store, generated: what someone who hands a user a record folder can put in it.

Record files whose run ids traverse (`../../outside/pwned`, an absolute path, 300 characters,
a NUL, a trailing newline), a FIFO and a link to /dev/zero named *.json, a link to a record
outside the store and a linked machine folder (both holding SECRET), a sparse 65 MiB file,
JSON nested 100,000 deep, an index.sqlite of the store's own that lists the outside record
with a trigger, and valid records whose texts carry terminal escape sequences, Markdown links
and images, CSV formulas and 1 MB fields. Only the valid records may show, each text made
safe; nothing outside the output may change.
"""
from __future__ import annotations

import copy
import json
import os
import re
import sqlite3
from pathlib import Path
from typing import Any

GOLDEN = json.loads((Path(__file__).resolve().parent / "golden" / "record_v1.json").read_text())
SECRET = "creds-4f9d2a71"  # text of files outside the store: no output may show it
# An OSC 8 hyperlink, a colour, a cursor move, a bidi override, a NUL and a bell
ESCAPES = "\x1b]8;;https://evil.example/t\x07click\x1b]8;;\x07\x1b[31mRED\x1b[0m\x1b[2J" \
          "\u202eevil\x00\x07"
MARKDOWN = ("[details](https://evil.example/d) ![p](https://evil.example/p.png) "
            "<img src=https://evil.example/pixel.png> www.evil.example mail@evil.example")
FORMULAS = ("=HYPERLINK(\"https://evil.example\",\"x\")", "+cmd|' /C calc'!A0", "@SUM(1+1)",
            "-2+3")
BIG = "y" * 2**20
TRAVERSING_IDS = ("../../outside/pwned", "/tmp/dtbench-abs-pwned", "a" * 300, "nul\x00id",
                  "newline\n")
# What a terminal must never receive from a record: C0 and C1 controls but line feed and tab,
# DEL, and the bidi and zero-width format characters.
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


def record(run_id: str, *, second: int = 0, **changes: Any) -> dict[str, Any]:
    """The golden record under another run id and time, with `changes` to its top level."""
    made = copy.deepcopy(GOLDEN)
    made.update(run_id=run_id, created_at=f"2024-01-02T03:04:{second:02d}Z", **changes)
    return made


def payload_records() -> list[dict[str, Any]]:
    """Valid records whose texts are hostile: the machine's CPU model (its label), the spec's
    size and precision, a metric's name and unit, and a failed run's error."""
    machine = {**GOLDEN["machine"], "cpu_vendor": None, "cpu_family": None,
               "cpu_model_number": None, "cpu_model": f"{ESCAPES} {MARKDOWN} {FORMULAS[0]}"}
    shown = record("20240102T030410Z-hep_cnn-payload", second=10, machine=machine)
    shown["spec"] = {**GOLDEN["spec"], "size": FORMULAS[0], "precision": FORMULAS[1],
                     "backend": f"{MARKDOWN} {ESCAPES}"}
    shown["metrics"] = [*GOLDEN["metrics"],
                        {"name": f"m{ESCAPES}{MARKDOWN}", "unit": BIG, "value": 1.0,
                         "higher_is_better": True, "samples": [1.0, 1.1, 0.9]}]
    failed = record("20240102T030411Z-hep_cnn-failed", second=11, status="failed",
                    error=f"{ESCAPES} {MARKDOWN} {FORMULAS[2]} {BIG}")
    weird = record("20240102T030412Z-x-weird", second=12)
    weird["spec"] = {**GOLDEN["spec"], "workload": f"{FORMULAS[2]}{ESCAPES}",
                     "size": FORMULAS[3]}
    return [shown, failed, weird]


def write_json(path: Path, document: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def hostile_store(root: Path) -> Path:
    """The store at root/store, with the files outside it at root/outside and root/elsewhere;
    returns the store's folder."""
    store = root / "store"
    folder = store / "m" / "c"
    write_json(folder / "golden.json", GOLDEN)
    for index, made in enumerate(payload_records()):
        write_json(folder / f"payload{index}.json", made)
    for index, run_id in enumerate(TRAVERSING_IDS):
        write_json(folder / f"traversal{index}.json", record(run_id, second=20 + index))
    os.mkfifo(folder / "fifo.json")
    os.mkfifo(store / "fifo.json")
    (folder / "zero.json").symlink_to("/dev/zero")
    outside = write_json(root / "outside" / "creds.json",
                         record("20240102T030430Z-hep_cnn-outside", error=SECRET))
    (folder / "creds.json").symlink_to(os.path.relpath(outside, folder))
    write_json(root / "elsewhere" / "c" / "linked.json",
               record("20240102T030431Z-hep_cnn-linked", error=SECRET))
    (store / "linked-machine").symlink_to(root / "elsewhere")
    with open(folder / "huge.json", "wb") as sparse:
        sparse.truncate(65 * 2**20)
    (folder / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    forged_index(store / "index.sqlite", "../outside/creds.json")
    return store


def forged_index(path: Path, listed: str) -> None:
    """An index as a store of an older dtbench held it, listing `listed` with made-up figures
    and a trigger that re-adds it whenever a row is deleted."""
    connection = sqlite3.connect(path)
    try:
        connection.execute("CREATE TABLE runs (run_id, path, created_at, status, workload, "
                           "m_throughput, file_bytes, file_mtime_ns, PRIMARY KEY (path))")
        connection.execute("INSERT INTO runs VALUES ('forged', ?, '2024-01-02', 'success', "
                           "'hep_cnn', 1e12, 0, 0)", (listed,))
        connection.execute("CREATE TRIGGER keep AFTER DELETE ON runs BEGIN INSERT INTO runs "
                           "VALUES ('forged', old.path, '', 'success', 'hep_cnn', 1e12, 0, 0);"
                           " END")
        connection.commit()
    finally:
        connection.close()


def snapshot(root: Path, skip: tuple[Path, ...] = ()) -> dict[str, tuple[str, bytes | str]]:
    """Every entry under root (links not followed, FIFOs not opened): its kind and content
    (a link's target), but those under `skip`."""
    found: dict[str, tuple[str, bytes | str]] = {}
    for folder, names, files in os.walk(root):
        here = Path(folder)
        if any(here == s or s in here.parents for s in skip):
            names[:] = []
            continue
        for name in [*names, *files]:
            path = here / name
            if any(path == s for s in skip):
                continue
            key = str(path.relative_to(root))
            if path.is_symlink():
                found[key] = ("link", os.readlink(path))
            elif path.is_fifo():
                found[key] = ("fifo", b"")
            elif path.is_file():
                size = path.stat().st_size
                found[key] = ("file", path.read_bytes() if size < 2**21 else str(size))
            else:
                found[key] = ("dir", b"")
    return found
