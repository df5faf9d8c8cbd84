"""A hostile store, generated: what someone who hands a user a record folder can put in it.

Record files whose run ids traverse (`../../outside/pwned`, an absolute path, 300 characters,
a NUL, a trailing newline), a FIFO and a link to /dev/zero named *.json, a link to a record
outside the store and a linked machine folder (both holding SECRET), a sparse 65 MiB file,
JSON nested 100,000 deep, an index.sqlite of the store's own that lists the outside record
with a trigger, records whose texts carry terminal escape sequences (which the schema
refuses), and valid records whose texts carry Markdown links and images, CSV formulas,
mathtext and 60,000-character fields. Only the valid records may show, each text made safe;
nothing outside the output may change.

ISSUE_52 holds the records that crashed a reader at 1b3cb06 although the schema of the time
took them (small edits of the golden record): each now shows, or is refused with a warning.
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
BIG = "y" * 60_000  # within the schema's 65,536 characters: the filters cut it to 500
MATHTEXT = r"a$\foo$b"  # matplotlib's mathtext raised ParseFatalException on it
TRAVERSING_IDS = ("../../outside/pwned", "/tmp/dtbench-abs-pwned", "a" * 300, "nul\x00id",
                  "newline\n")
# What a terminal must never receive from a record: C0 and C1 controls but line feed and tab,
# DEL, and the bidi and zero-width format characters.
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")

UNREACHABLE = "postgresql://fuzz@127.0.0.1:1/fuzz"
# Every reader and view, called in-process: (name, argv with {store}, {out}, and {a} and {b}:
# the files of two records holding losses)
READERS = [
    ("report", ["report", "{store}"]),
    ("report html", ["report", "{store}", "-o", "{out}/r.html"]),
    ("report csv", ["report", "{store}", "-o", "{out}/r.csv"]),
    ("report by machine", ["report", "{store}", "--by", "machine"]),
    ("report by machine csv", ["report", "{store}", "--by", "machine", "-o", "{out}/m.csv"]),
    ("compare", ["compare", "{store}", "{store}"]),
    ("compare md", ["compare", "{store}", "{store}", "--format", "md"]),
    ("compare trajectory", ["compare", "{a}", "{b}", "--trajectory"]),
    ("history", ["history", "{store}", "-o", "{out}/h.html", "--json", "{out}/h.json"]),
    ("history of a metric the index lacks", ["history", "{store}", "--metric", "tokens_per_s"]),
    ("publish", ["publish", "{store}", "-o", "{out}/site"]),
    ("predict calibration", ["predict", "--calibration", "--calibrate-from", "{store}"]),
    ("predict", ["predict", "hep_cnn", "--size", "tiny", "--calibrate-from", "{store}",
                 "--network", "10GbE", "--nodes", "1,2", "-o", "{out}/p.md"]),
    ("store import", ["store", "import", "{store}", "--to", UNREACHABLE]),
]


def record(run_id: str, *, second: int = 0, **changes: Any) -> dict[str, Any]:
    """The golden record under another run id and time, with `changes` to its top level."""
    made = copy.deepcopy(GOLDEN)
    made.update(run_id=run_id, created_at=f"2024-01-02T03:04:{second:02d}Z", **changes)
    return made


def payload_records() -> list[dict[str, Any]]:
    """Valid records whose texts are hostile: the machine's CPU model (its label), the spec's
    size, precision and workload, a metric's name and unit, and a failed run's error."""
    machine = {**GOLDEN["machine"], "cpu_vendor": None, "cpu_family": None,
               "cpu_model_number": None, "cpu_model": f"{MARKDOWN[:150]} {FORMULAS[0]}"}
    shown = record("20240102T030410Z-hep_cnn-payload", second=10, machine=machine)
    shown["spec"] = {**GOLDEN["spec"], "size": FORMULAS[0], "precision": FORMULAS[1],
                     "backend": f"{MARKDOWN[:200]} {MATHTEXT}"}
    shown["metrics"] = [*GOLDEN["metrics"],
                        {"name": f"m{MARKDOWN[:200]}", "unit": f"{MATHTEXT} {FORMULAS[1]}",
                         "value": 1.0, "higher_is_better": True, "samples": [1.0, 1.1, 0.9],
                         "note": BIG}]
    failed = record("20240102T030411Z-hep_cnn-failed", second=11, status="failed",
                    error=f"{MARKDOWN} {FORMULAS[2]} {MATHTEXT} {BIG}")
    weird = record("20240102T030412Z-x-weird", second=12)
    weird["spec"] = {**GOLDEN["spec"], "workload": f"{FORMULAS[2]}{MATHTEXT}",
                     "size": FORMULAS[3]}
    return [shown, failed, weird]


def escape_records() -> list[dict[str, Any]]:
    """Records whose texts carry terminal escape sequences, bidi overrides and C1 controls
    (in the machine's label, a metric's name, a failed run's error, a workload): the schema
    refuses them, so every reader skips them with a warning naming the file."""
    machine = {**GOLDEN["machine"], "cpu_vendor": None, "cpu_family": None,
               "cpu_model_number": None, "cpu_model": f"{ESCAPES} x"}
    label = record("20240102T030413Z-hep_cnn-escape", second=13, machine=machine)
    metric = record("20240102T030414Z-hep_cnn-escape", second=14)
    metric["metrics"] = [*GOLDEN["metrics"], {"name": f"m{ESCAPES}", "value": 1.0}]
    error = record("20240102T030415Z-hep_cnn-escape", second=15, status="failed",
                   error=f"{ESCAPES} \x9b31m C1")
    workload = record("20240102T030416Z-x-escape", second=16)
    workload["spec"] = {**GOLDEN["spec"], "workload": f"w\u202e{ESCAPES}"}
    return [label, metric, error, workload]


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
    for index, made in enumerate(escape_records()):
        write_json(folder / f"escape{index}.json", made)
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


# ---------------------------------------------------------------- issue 52's reproductions

HUGE = 10**400  # under Python's 4,300-digit limit: the schema of 1b3cb06 took it


def _spec(**changes: Any) -> dict[str, Any]:
    return {**GOLDEN["spec"], **changes}


def _with_metric(run_id: str, second: int, **metric: Any) -> dict[str, Any]:
    made = record(run_id, second=second)
    made["metrics"] = [*GOLDEN["metrics"], metric]
    return made


def _trajectory(**changes: Any) -> dict[str, Any]:
    return {"ranks": [0, 1], "first_step": 1, "samples_per_step": 32,
            "losses": [[2.3, 2.2, 2.1], [2.31, 2.21, 2.11]], "step_seconds": [0.1, 0.1, 0.1],
            **changes}


def _over_commits(values: list[float]) -> list[dict[str, Any]]:
    """One record a commit, the throughput of each given."""
    made = []
    for index, value in enumerate(values):
        one = record(f"20240102T0305{index:02d}Z-hep_cnn-commit{index}", second=index)
        one["code"] = {**GOLDEN["code"], "commit": f"{index + 1:x}" * 40}
        one["metrics"] = [*GOLDEN["metrics"], {"name": "throughput", "unit": "samples/s",
                                               "value": value, "higher_is_better": True,
                                               "samples": [value, value, value]}]
        made.append(one)
    return made


def _on_two_machines(made: dict[str, Any]) -> list[dict[str, Any]]:
    """The record, and a copy from another machine (publish draws its machines chart then)."""
    other = copy.deepcopy(made)
    other.update(run_id=f"{made['run_id']}-other", machine={**made["machine"],
                                                            "name": "other box"})
    return [made, other]


def _quality(**changes: Any) -> dict[str, Any]:
    return {"name": "quality", "unit": "1", "value": 0.8, "higher_is_better": True,
            "metric": "accuracy", "target": 0.75, "reached": True,
            "history": [{"step": 4, "seconds": 1.0, "accuracy": 0.5},
                        {"step": 8, "seconds": 2.0, "accuracy": 0.8}], **changes}


# name -> (records, whether the schema now takes them: shown, else refused with a warning,
#          the commands that crashed on them)
ISSUE_52: dict[str, tuple[list[dict[str, Any]], bool, tuple[str, ...]]] = {
    "losses holding null": (
        [record("20240102T030501Z-hep_cnn-nullloss", second=1, trajectory=_trajectory(
            losses=[[2.3, None, 2.1], [None, 2.21, 2.11]]))], True, ("report html",)),
    "mathtext in a quality metric, a workload and a precision": (
        [_with_metric("20240102T030502Z-hep_cnn-mathtext", 2,
                      **_quality(metric=MATHTEXT, history=[
                          {"seconds": 1.0, MATHTEXT: 0.5}, {"seconds": 2.0, MATHTEXT: 0.8}])),
         *_on_two_machines({**_over_commits([120.0])[0], "run_id": "20240102T030503Z-x-mathtext",
                            "spec": _spec(workload=MATHTEXT, precision=MATHTEXT)})],
        True, ("report html", "publish")),
    "an interconnect speed of 'fast'": (
        [record("20240102T030504Z-hep_cnn-fast", second=4, machine={
            **GOLDEN["machine"], "interconnect": {"type": "ethernet", "speed_mbps": "fast"}})],
        False, ("report by machine", "publish")),
    "a throughput of 1.7e308": (
        _on_two_machines(_over_commits([1.7e308])[0]), False, ("report html", "publish")),
    "±1.7e308 over four commits": (
        _over_commits([1.7e308, -1.7e308, 1.7e308, -1.7e308]), False, ("history", "publish")),
    "integers of 400 digits": (
        [{**record(f"20240102T0305{10 + i}Z-hep_cnn-huge{i}", second=10 + i),
          "spec": _spec(**{field: HUGE})}
         for i, field in enumerate(("world_size", "loader_workers", "batch_per_rank"))]
        + [record(f"20240102T0305{20 + i}Z-hep_cnn-hugetraj{i}", second=20 + i,
                  trajectory=_trajectory(**{field: value}))
           for i, (field, value) in enumerate((
               ("losses", [[HUGE, 2.2, 2.1]] * 2), ("samples_per_step", HUGE),
               ("first_step", HUGE), ("step_seconds", [HUGE, 0.1, 0.1])))],
        False, ("report html", "compare trajectory", "predict calibration")),
    "a quality target 'abc' and a quality metric ['a']": (
        [_with_metric("20240102T030530Z-hep_cnn-target", 30, **_quality(target="abc")),
         _with_metric("20240102T030531Z-hep_cnn-qmetric", 31, **_quality(metric=["a"]))],
        False, ("report html",)),
}

# Found since, by the fuzz (tests/harness/test_fuzz_readers.py) at 1b3cb06 and while fixing:
# records the schema took that crashed a reader.
FOUND_SINCE: dict[str, tuple[list[dict[str, Any]], bool, tuple[str, ...]]] = {
    "losses whose rows are all empty": (  # min() of nothing in the loss plot
        [record("20240102T030540Z-hep_cnn-emptyloss", second=40,
                trajectory=_trajectory(losses=[[], []]))], True, ("report html",)),
    "notes.traces that is no list": (  # every report: a float is not iterable
        [record("20240102T030541Z-hep_cnn-traces", second=41,
                notes={**GOLDEN.get("notes", {}), "traces": 1.5})], False, ("report",)),
    "a throughput of 0 over four commits": (  # ruptures: "the penalty must be positive: 0"
        _over_commits([0.0, 0.0, 0.0, 0.0]), True, ("history", "publish")),
    "a throughput of 1e-300 over four commits": (
        _over_commits([1e-300, 1e-300, 2e-300, 1e-300]), True, ("history",)),
}
