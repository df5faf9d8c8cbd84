"""report, compare, history and publish over a store of 100,000 generated records, in a
directory store (SQLite index) and in a PostgreSQL server: seconds and peak memory (max RSS)
of each command, each in a process of its own. The goal is under 30 s and 2 GiB each.

    python benchmarks/bench_store_scale.py                    # 100,000 records
    python benchmarks/bench_store_scale.py --records 20000 --no-postgres

The records are copies of a real training record of results/ (the median-sized successful
one), spread as a fleet's history would be: MACHINES machines x commits x 20 experiments
(4 workloads x 5 batch sizes) x 5 repeats, throughput with 2% noise and, on one machine, a
20% drop half-way. PostgreSQL runs as a throw-away server as the tests start it (needs
Debian's postgresql 15 and root or the postgres user). Prints figures, asserts nothing.
"""
from __future__ import annotations

import argparse
import copy
import hashlib
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # postgres.py: the throwaway server of the tests

MACHINES, EXPERIMENTS, REPEATS = 10, 20, 5
WORKLOADS = ("alexnet", "hep_cnn", "lstm", "resnet50")
BATCHES = (16, 32, 64, 128, 256)
MEASURE = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
           "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, "
           "stderr=subprocess.PIPE, text=True); "
           "print(r.returncode, time.perf_counter() - t, "
           "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, "
           "repr(r.stderr.strip().splitlines()[-1:] if r.returncode > 1 else ''))")


def template() -> dict[str, Any]:
    """The median-sized successful training record published in results/."""
    found = []
    for path in sorted((ROOT / "results").glob("*/*/*.json")):  # results/<machine>/<commit>/
        try:
            record = json.loads(path.read_text())
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("status") == "success" and \
                (record.get("spec") or {}).get("task", "train") == "train" and \
                any(m.get("samples") for m in record.get("metrics", [])):
            found.append((path.stat().st_size, str(path), record))
    if not found:
        raise SystemExit("no successful training record with samples in results/")
    found.sort(key=lambda item: item[:2])
    size, path, record = found[len(found) // 2]
    print(f"template: {Path(path).relative_to(ROOT)} ({size} bytes)")
    return record


def generate(count: int, seed: int = 0):
    """`count` records: machine-major, then commit, experiment and repeat."""
    base = template()
    rng = random.Random(seed)
    per_commit = EXPERIMENTS * REPEATS
    commits = max(1, count // (MACHINES * per_commit))
    made = 0
    for machine in range(MACHINES):
        for c in range(commits):
            commit = hashlib.sha1(f"{machine}-{c}".encode()).hexdigest()
            level = 0.8 if machine == 0 and c >= commits // 2 else 1.0
            for e in range(EXPERIMENTS):
                workload, batch = WORKLOADS[e % 4], BATCHES[e // 4]
                for r in range(REPEATS):
                    if made == count:
                        return
                    record = copy.deepcopy(base)
                    made += 1
                    day = 1 + c * 27 // max(1, commits)
                    record["run_id"] = f"2026{(c % 12) + 1:02d}{day:02d}T00{e:02d}{r:02d}Z-" \
                        f"{workload}-{machine:02d}{c:04d}{e:02d}{r}"
                    record["created_at"] = f"2026-11-{day:02d}T{c % 24:02d}:{e:02d}:{r:02d}Z"
                    record["machine"]["name"] = f"fleet-{machine:02d}"
                    record["machine"]["machine_id"] = f"{machine:016x}"
                    record["code"] = {"commit": commit, "branch": "main", "dirty": False,
                                      "ci_url": None}
                    record["spec"].update(workload=workload, batch_size=batch)
                    record["spec_key"] = hashlib.sha1(f"{workload}{batch}".encode()
                                                      ).hexdigest()[:16]
                    factor = level * (1 + 0.02 * rng.gauss(0, 1))
                    for metric in record["metrics"]:
                        if metric["name"] in ("throughput", "achieved_flops", "mfu"):
                            metric["value"] *= factor
                            if metric.get("samples"):
                                metric["samples"] = [v * factor for v in metric["samples"]]
                    yield record


def write_directory(count: int, root: Path) -> Path:
    """The records as `dtbench run` lays them out, and their index rows as Store.add writes
    them (without validating each copy of the one valid template again: 6 ms a record)."""
    from harness.store.directory import Store, record_folder

    store = Store(root / "store")
    rows = []
    for i, record in enumerate(generate(count)):
        folder = store.root / record_folder(record)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{record['run_id']}.json"
        path.write_text(json.dumps(record, indent=1) + "\n")
        rows.append(store._row(record, path))
        if (i + 1) % 20000 == 0:
            store._index(rows)
            rows = []
            print(f"  wrote {i + 1} records", flush=True)
    store._index(rows)
    return store.root


def candidate(root: Path) -> Path:
    """One commit's records of fleet-00 (the last generated there), as a CI run's store."""
    folder = root / "candidate"
    for record in generate(EXPERIMENTS * REPEATS, seed=1):
        record["code"]["commit"] = "c" * 40
        record["run_id"] = "cand-" + record["run_id"]
        folder.mkdir(exist_ok=True)
        (folder / f"{record['run_id']}.json").write_text(json.dumps(record))
    return folder


def measure(label: str, argv: list[str]) -> None:
    done = subprocess.run([sys.executable, "-c", MEASURE, sys.executable, "-m", "harness",
                           *argv], capture_output=True, text=True, cwd=ROOT)
    code, seconds, rss_kib, error = done.stdout.split(" ", 3)
    print(f"  {label:34s} {float(seconds):7.1f} s  {int(rss_kib) / 2**20:5.2f} GiB  exit "
          f"{code} {error.strip() if error.strip() not in ('', repr('')) else ''}",
          flush=True)


def commands(store: str, root: Path, cand: Path, name: str) -> None:
    out = root / name
    shutil.rmtree(out, ignore_errors=True)  # a kept folder's outputs of a previous run
    out.mkdir()
    measure(f"report ({name})", ["report", store, "-o", str(out / "report.html")])
    measure(f"report --by machine ({name})",
            ["report", store, "--by", "machine", "-o", str(out / "machines.md")])
    measure(f"compare --baseline-branch ({name})",
            ["compare", store, str(cand), "--baseline-branch", "main"])
    measure(f"history ({name})", ["history", store, "--json", str(out / "history.json")])
    measure(f"publish ({name})", ["publish", store, "-o", str(out / "site")])


def postgres(root: Path, store: Path) -> tuple[Any, str] | None:
    try:
        from postgres import PASSWORD, ROLE, Server
    except Exception as exc:  # noqa: BLE001 - any reason PostgreSQL cannot be used here
        print(f"PostgreSQL skipped: {exc}")
        return None
    server = Server()
    server.init()
    server.start()
    server.admin(f"CREATE ROLE {ROLE} LOGIN PASSWORD '{PASSWORD}'")
    server.admin(f"CREATE DATABASE scale OWNER {ROLE}")
    url = server.url("scale")
    from harness.store.directory import COLUMNS, Store
    from harness.store.postgres import TABLE, PostgresStore, row_of

    started = time.perf_counter()
    connection = PostgresStore(url)._connect()  # creates the table
    with connection.transaction(), connection.cursor() as cursor:
        with cursor.copy(f"COPY {TABLE} ({', '.join(COLUMNS)}, record) FROM STDIN") as copy:
            for path in Store(store).record_paths():
                text = path.read_text()
                copy.write_row((*row_of(json.loads(text)), text))
    seed_verified(url)
    connection.close()
    print(f"  copied into PostgreSQL: {time.perf_counter() - started:.1f} s")
    return server, url


def seed_verified(url: str) -> None:
    """The cache of verified rows (harness/store/server_rows) as the first command would fill
    it, without validating each copy of the one valid template again (as write_directory
    fills the directory index): the commands are measured warm, as after that first one."""
    from harness.store.postgres import _TEXT, TABLE, PostgresStore
    from harness.store.server_rows import STAMP_SQL, RowCache, cells_of

    store = PostgresStore(url)
    connection = store._connect()
    try:
        cache = RowCache(store._identity(connection))
        rows = connection.execute(f"SELECT run_id, {STAMP_SQL}, {_TEXT} FROM {TABLE}")
        cache.remember([(run_id, stamp, json.dumps(cells_of(json.loads(text))), None)
                        for run_id, stamp, text in rows])
        cache.close()
    finally:
        connection.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--no-sqlite", action="store_true",
                        help="only the PostgreSQL store (e.g. again over a --keep directory)")
    parser.add_argument("--keep", help="build the stores in this directory and keep them")
    args = parser.parse_args()
    root = Path(args.keep or tempfile.mkdtemp(prefix="bench-store-scale-"))
    root.mkdir(parents=True, exist_ok=True)
    print(f"{args.records} records in {root}")
    store = root / "store" if (root / "store").is_dir() else write_directory(args.records, root)
    cand = root / "candidate" if (root / "candidate").is_dir() else candidate(root)
    if not args.no_sqlite:
        commands(str(store), root, cand, "sqlite")
    if not args.no_postgres:
        found = postgres(root, store)
        if found:
            server, url = found
            try:
                commands(url, root, cand, "postgresql")
            finally:
                server.stop("immediate")
                shutil.rmtree(server.home, ignore_errors=True)
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
