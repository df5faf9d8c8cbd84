"""Property-based fuzzing of every parser that reads outside input.

Records, `--json` lists and pytest-benchmark files (check_record, load_record,
records_from_document, load_inputs), suite TOML (parse_suite) and `--sizes` (parse_size,
parse_sizes): whatever the input, the outcome is a usable value or the one documented error
(SchemaError, UsageError) on one line; load_inputs turns every bad file into a warning.
"""
from __future__ import annotations

import copy
import datetime as dt
import json
import math
import re
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from harness.commands.cli import main
from harness.core.errors import SchemaError, UsageError
from harness.microbench.collectives import MAX_BYTES, parse_size, parse_sizes
from harness.records.record import check_record, load_record
from harness.run.suites import RUN_KEYS, TOP_KEYS, Suite, parse_suite
from harness.spec.fields import identity as identity_of
from harness.spec.specs import RUN_FIELDS
from harness.store.directory import Store
from harness.store.sources import load_inputs, records_from_document

GOLDEN_PATH = Path(__file__).parent / "golden" / "record_v1.json"
GOLDEN = json.loads(GOLDEN_PATH.read_text(encoding="utf-8"))

FUZZ = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow,
                                       HealthCheck.function_scoped_fixture])
FILE_FUZZ = settings(FUZZ, max_examples=80)

# ---------------------------------------------------------------- strategies

ODD_VALUES = [None, True, False, 0, -1, 1.5, math.nan, math.inf, -math.inf, 2**70, 10**400,
              "", "1", "x" * 300, [], [1], {}, {"a": None}, "\n"]
# Copied on every draw: a shared [] mutated inside one record would leak into later examples
# (even into itself, making a cycle).
scalars = (st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
           | st.sampled_from(ODD_VALUES).map(copy.deepcopy))
json_values = st.recursive(
    scalars,
    lambda children: (st.lists(children, max_size=5)
                      | st.dictionaries(st.text(max_size=8), children, max_size=5)),
    max_leaves=25)


def _locations(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path inside a JSON document, outermost first."""
    found = []
    items = node.items() if isinstance(node, dict) else (
        enumerate(node) if isinstance(node, list) else ())
    for key, child in items:
        found.append((*path, key))
        found.extend(_locations(child, (*path, key)))
    return found


def _at(node: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        node = node[key]
    return node


@st.composite
def mutated_records(draw: st.DrawFn) -> dict[str, Any]:
    """The golden record with 1-4 keys dropped or values replaced by other types."""
    record = copy.deepcopy(GOLDEN)
    for _ in range(draw(st.integers(1, 4))):
        locations = _locations(record)
        if not locations:
            break
        # Weight the fields reports use: half the mutations hit spec or metrics.
        hot = [p for p in locations if p[0] in ("spec", "metrics")] or locations
        path = draw(st.sampled_from(hot) | st.sampled_from(locations))
        parent = _at(record, path[:-1])
        if draw(st.booleans()):
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(json_values)
    return record


# ---------------------------------------------------------------- what a report relies on

def tabulate(record: dict[str, Any]) -> str:
    """Everything a report or a comparison may do with a record that passed check_record."""
    spec = record["spec"]
    identity = json.dumps(identity_of(spec, RUN_FIELDS), sort_keys=True, default=str)
    groups = {identity: [record]}
    cells = [record["run_id"], record["created_at"], record["status"], spec["workload"],
             record["error"] or "-", str(len(groups)), str(len(record["events"]))]
    cells += [str(record[key].get("hostname", "-")) for key in ("machine",)]
    cells += [str(record[key].get("version", "-")) for key in ("software", "harness")]
    for entry in record["metrics"]:
        value = entry["value"]
        cells += [entry["name"], entry.get("unit", ""),
                  "-" if value is None else f"{value / 1e9:.3f} {value:.4g}",
                  "higher" if entry.get("higher_is_better", True) else "lower"]
        samples = entry.get("samples", [])
        if samples:
            cells.append(f"{statistics.median(samples):.4g} {min(samples):.3g}")
        stats = entry.get("stats", {})
        for key in ("n", "min", "max", "median", "mean", "q1", "q3", "iqr", "stddev"):
            if key in stats:
                cells.append(f"{stats[key] / 1.0:.4g}")
        if "ci95" in stats:
            low, high = stats["ci95"]
            cells.append(f"[{low / 1e9:.2f}, {high / 1e9:.2f}]")
        cells += entry.get("warnings", [])
    text = " | ".join(cells)
    text.encode("utf-8")
    return text


def accepted(call: Callable[[], Any], error: type[Exception] = SchemaError) -> Any:
    """The call's result, or None when it raised `error` with a one-line message."""
    try:
        return call()
    except error as exc:
        message = str(exc)
        assert message and "\n" not in message, repr(message)
        return None


# ---------------------------------------------------------------- records

def test_golden_record_is_valid_and_tabulates() -> None:
    assert check_record(copy.deepcopy(GOLDEN)) == GOLDEN
    assert "hep_cnn" in tabulate(GOLDEN)


def test_every_published_record_passes(tmp_path: Path) -> None:
    """Records dtbench itself wrote (quick suite, scaling and comm runs in results/) load."""
    paths = Store(Path(__file__).resolve().parents[2] / "results").record_paths()
    assert paths, "no published records in results/"
    for path in paths:
        copied = tmp_path / path.name
        copied.write_bytes(path.read_bytes())
        tabulate(load_record(copied))


@FUZZ
@given(value=json_values)
def test_check_record_takes_any_json_value(value: Any) -> None:
    record = accepted(lambda: check_record(value, "fuzz.json"))
    if record is not None:
        tabulate(record)


@FUZZ
@given(record=mutated_records())
@example(record={**GOLDEN, "schema_version": True})
@example(record={**GOLDEN, "metrics": [{"name": "x", "value": 10**400}]})
@example(record={**GOLDEN, "run_id": "lone \udc80 surrogate"})
def test_check_record_takes_any_mutation_of_a_valid_record(record: dict[str, Any]) -> None:
    checked = accepted(lambda: check_record(record, "fuzz.json"))
    if checked is not None:
        tabulate(checked)


@FILE_FUZZ
@given(record=mutated_records())
def test_a_mutated_record_file_loads_like_the_object(tmp_path: Path,
                                                     record: dict[str, Any]) -> None:
    path = tmp_path / "mutated.json"
    path.write_text(json.dumps(record), encoding="utf-8")
    direct = accepted(lambda: check_record(copy.deepcopy(record), str(path)))
    loaded = accepted(lambda: load_record(path))
    assert (direct is None) == (loaded is None)
    if loaded is not None:
        tabulate(loaded)


@FILE_FUZZ
@given(data=st.binary(max_size=300)
       | st.builds(lambda r, cut: json.dumps(r).encode()[:cut], mutated_records(),
                   st.integers(0, 9000)))
@example(data=b"[" * 100_000)
@example(data=b'{"schema_version": 1, "n": ' + b"9" * 5000 + b"}")
@example(data=b"\xff\xfe\x00garbage")
@example(data=b"")
def test_any_bytes_load_as_a_record_or_a_schema_error(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "bytes.json"
    path.write_bytes(data)
    record = accepted(lambda: load_record(path))
    if record is not None:
        tabulate(record)
    loaded = load_inputs([str(path)])
    assert len(loaded.records) + len(loaded.warnings) == 1
    if loaded.warnings:
        assert str(path) in loaded.warnings[0] and "\n" not in loaded.warnings[0]
    else:
        tabulate(loaded.records[0])


# ---------------------------------------------------------------- --json lists, pytest-benchmark

bench_entries = st.fixed_dictionaries(
    {"name": st.text(max_size=10) | json_values},
    optional={
        "fullname": st.text(max_size=20) | json_values,
        "stats": st.fixed_dictionaries({}, optional={
            "data": st.lists(st.floats() | st.integers(-2**64, 2**64), max_size=8) | json_values,
            "median": st.floats() | st.integers(-2**64, 2**64) | json_values,
            "rounds": json_values}) | json_values,
        "extra_info": st.fixed_dictionaries({}, optional={
            "batch_size": st.integers(-2, 2**64) | json_values,
            "flops_per_sample": st.floats() | st.integers() | json_values,
            "spec": st.just(GOLDEN["spec"]).map(copy.deepcopy)
            | mutated_records().map(lambda r: r.get("spec")) | json_values,
            "spec_key": json_values}) | json_values,
    })
# Round times as pytest-benchmark records them: a few, or as many as a microsecond function
# gets (sum(range(1000)) ran 81,901 rounds) -- the statistics must scale to those.
many_times = st.builds(lambda n, seed: np.random.default_rng(seed).lognormal(-10, 0.3, n)
                       .tolist(), st.integers(1, 100_000), st.integers(0, 2**32 - 1))
plausible_bench_entries = st.fixed_dictionaries({
    "name": st.text(min_size=1, max_size=10),
    "stats": st.fixed_dictionaries({"data": st.lists(st.floats(0, 10), min_size=1, max_size=8)
                                             | many_times}),
}, optional={"extra_info": st.fixed_dictionaries({}, optional={
    "batch_size": st.integers(1, 256), "flops_per_sample": st.floats(0, 1e12),
    "spec": st.just(GOLDEN["spec"]).map(copy.deepcopy)})})
pytest_benchmark_documents = st.fixed_dictionaries({
    "benchmarks": st.lists(plausible_bench_entries | bench_entries, max_size=3),
    "machine_info": st.dictionaries(st.text(max_size=8), json_values, max_size=3)
    | st.just({"node": "n1", "cpu": {"brand_raw": "x", "count": 2}}).map(copy.deepcopy)
    | json_values,
    # Naive times only: an offset near year 1 or 9999 overflows (known bug, see below).
    "datetime": st.datetimes(timezones=st.none() | st.builds(
        dt.timezone, st.timedeltas(dt.timedelta(hours=-23), dt.timedelta(hours=23))),
    ).map(dt.datetime.isoformat) | json_values,
})


@FUZZ
@given(document=json_values | st.lists(mutated_records(), max_size=3)
       | pytest_benchmark_documents)
def test_records_from_document_gives_records_or_a_schema_error(document: Any) -> None:
    records = accepted(lambda: records_from_document(document, "fuzz.json"))
    for record in records or []:
        tabulate(check_record(record, "again"))


@FILE_FUZZ
@given(document=json_values | st.lists(mutated_records(), max_size=3)
       | pytest_benchmark_documents)
def test_load_inputs_never_raises_on_a_document(tmp_path: Path, document: Any) -> None:
    path = tmp_path / "doc.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    loaded = load_inputs([str(path)])
    assert len(loaded.warnings) <= 1
    for record in loaded.records:
        tabulate(record)


def test_pytest_benchmark_huge_flops_is_a_schema_error() -> None:
    document = {"benchmarks": [{"name": "a", "stats": {"median": 0.1},
                                "extra_info": {"batch_size": 2, "flops_per_sample": 10**400}}],
                "machine_info": {}, "datetime": "2024-01-01T00:00:00"}
    with pytest.raises(SchemaError, match=r"fuzz\.json: malformed pytest-benchmark") as caught:
        records_from_document(document, "fuzz.json")
    assert "\n" not in str(caught.value)


def test_pytest_benchmark_out_of_range_datetime_is_a_schema_error() -> None:
    document = {"benchmarks": [{"name": "a", "stats": {"median": 0.1}}], "machine_info": {},
                "datetime": "0001-01-01T00:00:00+05:00"}
    with pytest.raises(SchemaError, match=r"fuzz\.json: .*date value out of range") as caught:
        records_from_document(document, "fuzz.json")
    assert "\n" not in str(caught.value)


# ---------------------------------------------------------------- each guarantee is checked

def _with(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    record = copy.deepcopy(GOLDEN)
    _at(record, path[:-1])[path[-1]] = value
    return record


REJECTED = [
    (("spec", "workload"), 3, "spec.workload"),
    (("spec", "world_size"), [2], "spec.world_size"),
    (("metrics", 0, "name"), None, "name"),
    (("metrics", 0, "value"), True, "value"),
    (("metrics", 0, "value"), math.nan, "value"),
    (("metrics", 0, "value"), math.inf, "value"),
    (("metrics", 0, "value"), "0.01", "value"),
    (("metrics", 0, "value"), 10**400, "value"),
    (("metrics", 0, "samples"), [0.01, math.nan], "samples"),
    (("metrics", 0, "samples"), "0.01", "samples"),
    (("metrics", 0, "samples"), [True], "samples"),
    (("metrics", 0, "stats"), [], "stats"),
    (("metrics", 0, "stats", "ci95"), [0.01], "ci95"),
    (("metrics", 0, "stats", "median"), None, "stats.median"),
    (("metrics", 0, "unit"), 1, "unit"),
    (("metrics", 0, "higher_is_better"), "yes", "higher_is_better"),
    (("metrics", 1), "throughput", "metrics[1]"),
    (("metrics",), {}, "metrics"),
    (("spec",), [], "spec"),
    (("machine",), [], "machine"),
    (("software",), None, "software"),
    (("harness",), "0.1", "harness"),
    (("run_id",), 5, "run_id"),
    (("run_id",), "bad \udc80", "run_id"),
    (("created_at",), None, "created_at"),
    (("error",), ["x"], "error"),
    (("events",), {}, "events"),
    (("status",), ["success"], "status"),
    (("schema_version",), True, "schema_version"),
    # what no real run has (issue 52): a reader can take any record the schema allows
    (("spec", "world_size"), 2**70, "spec.world_size"),
    (("spec", "loader_workers"), 10**400, "spec.loader_workers"),
    (("metrics", 0, "value"), 1.7e308, "value"),
    (("metrics", 0, "value"), -0.5, "value"),  # a negative time
    (("metrics", 0, "samples"), [0.01, 1e31], "samples"),
    (("machine", "interconnect", "speed_mbps"), "fast", "speed_mbps"),
    (("machine", "cpu_model"), "x\x1b]8;;https://evil\x07y", "cpu_model"),
    (("spec", "precision"), "fp32\u202e", "precision"),
    (("notes", "x"), {"y": [1, 10**40]}, "notes.x.y[1]"),
    (("metrics", 0, "name"), "n" * 257, "name"),
    (("error",), "e" * 65537, "error"),
    (("metrics",), [{"name": "m", "value": 1.0}] * 1001, "metrics"),
]


@pytest.mark.parametrize(("path", "value", "named"), REJECTED,
                         ids=[f"{'.'.join(map(str, p))}={v!r:.20}" for p, v, _ in REJECTED])
def test_check_record_rejects_what_reports_cannot_use(path: tuple[Any, ...], value: Any,
                                                      named: str) -> None:
    with pytest.raises(SchemaError) as caught:
        check_record(_with(path, value), "bad.json")
    message = str(caught.value)
    assert message.startswith("bad.json: ") and named in message and "\n" not in message


def test_check_record_accepts_optional_metric_fields_absent_and_null_values() -> None:
    record = _with(("metrics", 0), {"name": "step_time", "value": None})
    assert check_record(record) is record
    assert check_record(_with(("error",), "a reason")) is not None
    assert check_record(_with(("spec", "world_size"), 2**24)) is not None


# ---------------------------------------------------------------- suites

def _toml_string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + re.sub(r"[\x00-\x1f\x7f]", lambda m: f"\\u{ord(m.group()):04x}", escaped) + '"'


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else _toml_string(key)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)  # nan, inf, -inf and 1e+16 are TOML as Python writes them
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"


def to_toml(document: dict[str, Any]) -> str:
    """A tiny TOML writer: scalars and arrays first, then [tables] and [[arrays of tables]]."""
    lines, tables = [], []
    for key, value in document.items():
        if isinstance(value, dict):
            tables.append(f"[{_toml_key(key)}]")
            tables += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()]
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            for item in value:
                tables.append(f"[[{_toml_key(key)}]]")
                tables += [f"{_toml_key(k)} = {_toml_value(v)}" for k, v in item.items()]
        else:
            lines.append(f"{_toml_key(key)} = {_toml_value(value)}")
    return "\n".join(lines + tables) + "\n"


toml_scalars = (st.booleans() | st.integers(-2**63, 2**63 - 1) | st.floats()
                | st.text(max_size=12))
toml_values = st.recursive(
    toml_scalars,
    lambda children: (st.lists(children, max_size=4)
                      | st.dictionaries(st.text(max_size=6), children, max_size=3)),
    max_leaves=10)
GOOD_RUN_VALUES = {
    str: st.sampled_from(["hep_cnn", "tiny", "cpu", "gloo", "fp32", ""]) | st.text(max_size=8),
    int: st.integers(0, 64),
    bool: st.booleans(),
    float: st.floats(0.5, 30.0),
    dict: st.dictionaries(st.sampled_from(["period", "H", "x"]), st.integers(0, 8)
                          | st.text(max_size=4), max_size=2),
}


def run_value(key: str) -> st.SearchStrategy[Any]:
    kinds = RUN_KEYS[key] if isinstance(RUN_KEYS[key], tuple) else (RUN_KEYS[key],)
    good = st.one_of([GOOD_RUN_VALUES[kind] for kind in kinds])
    return good | st.lists(good, min_size=1, max_size=3)


run_tables = st.dictionaries(
    st.sampled_from(sorted(RUN_KEYS)) | st.text(max_size=8),
    st.one_of([run_value(k) for k in sorted(RUN_KEYS)]) | toml_values, max_size=5)
suite_documents = st.fixed_dictionaries({}, optional={
    "name": st.text(max_size=10) | toml_values,
    "description": st.text(max_size=20) | toml_values,
    "defaults": run_tables | toml_values,
    "runs": st.lists(run_tables, max_size=3) | toml_values,
}) | st.dictionaries(st.sampled_from(TOP_KEYS) | st.text(max_size=8), toml_values, max_size=4)


@st.composite
def valid_suites(draw: st.DrawFn) -> dict[str, Any]:
    """Documents parse_suite must accept: known keys, right types, non-empty lists."""
    def table(min_size: int) -> dict[str, Any]:
        keys = draw(st.lists(st.sampled_from(sorted(set(RUN_KEYS) - {"workload"})),
                             unique=True, min_size=min_size, max_size=4))
        return {key: draw(st.lists(_good(key), min_size=1, max_size=2) | _good(key))
                for key in keys}

    def _good(key: str) -> st.SearchStrategy[Any]:
        kind = RUN_KEYS[key]
        if kind is int:
            return st.integers(0 if key in ("warmup", "threads", "seed") else 1, 64)
        if kind == (int, float):  # a positive number
            return st.integers(1, 64) | st.floats(0.5, 30.0)
        kinds = kind if isinstance(kind, tuple) else (kind,)
        return st.one_of([GOOD_RUN_VALUES[k] for k in kinds])

    runs = [{"workload": draw(st.sampled_from(["hep_cnn", "lstm"])), **table(0)}
            for _ in range(draw(st.integers(1, 3)))]
    return {"name": draw(st.text(min_size=1, max_size=10)), "defaults": table(0), "runs": runs}


@FUZZ
@given(text=st.text(max_size=200) | st.text(alphabet="[]{}=\"',.#\n\t abc123_-+:", max_size=80))
@example(text="a = " + "[" * 5000 + "]" * 5000)
@example(text="defaults = " + "{a = " * 3000 + "1" + "}" * 3000)
@example(text='[[runs]]\nworkload = "hep_cnn"\nsteps = 0\n')
def test_parse_suite_takes_any_text(text: str) -> None:
    suite = accepted(lambda: parse_suite(text, "suite fuzz.toml", "fuzz"), UsageError)
    assert suite is None or (isinstance(suite, Suite) and (suite.runs or suite.kernels))


@FUZZ
@given(document=suite_documents)
def test_parse_suite_takes_any_toml_document(document: dict[str, Any]) -> None:
    suite = accepted(lambda: parse_suite(to_toml(document), "suite fuzz.toml", "fuzz"),
                     UsageError)
    if suite is not None:
        for run in suite.runs:
            assert set(run) <= set(RUN_KEYS) and isinstance(run["workload"], str)
            assert all(not isinstance(v, list) for v in run.values())


@FUZZ
@given(document=valid_suites())
def test_valid_suite_expands_to_the_product_of_its_lists(document: dict[str, Any]) -> None:
    suite = parse_suite(to_toml(document), "suite fuzz.toml", "fuzz")
    assert suite.name == document["name"]
    expected = 0
    for entry in document["runs"]:
        merged = {**document["defaults"], **entry}
        expected += math.prod(len(v) if isinstance(v, list) else 1 for v in merged.values())
    assert len(suite.runs) == expected


def test_a_suite_that_expands_to_too_many_runs_is_refused() -> None:
    lists = "\n".join(f"{key} = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"
                      for key in ("nproc", "nnodes", "batch_size", "steps", "repeat", "seed",
                                  "threads", "bucket_mb", "warmup"))
    text = f'[[runs]]\nworkload = "hep_cnn"\n{lists}\n'
    with pytest.raises(UsageError, match="more than .* runs"):
        parse_suite(text, "suite big.toml", "big")


# ---------------------------------------------------------------- --sizes

SIZE_ALPHABET = "0123456789KMGkmgiB:, .-"


@FUZZ
@given(text=st.text(max_size=30) | st.text(alphabet=SIZE_ALPHABET, max_size=16))
@example(text="9" * 5000)
@example(text="٤M")
@example(text="4Q")
def test_parse_size_takes_any_text(text: str) -> None:
    size = accepted(lambda: parse_size(text), UsageError)
    assert size is None or (type(size) is int and 4 <= size <= MAX_BYTES)


@FUZZ
@given(text=st.text(max_size=30) | st.text(alphabet=SIZE_ALPHABET, max_size=24))
@example(text="4:4G")
@example(text="1K:" + "9" * 5000)
def test_parse_sizes_takes_any_text(text: str) -> None:
    sizes = accepted(lambda: parse_sizes(text), UsageError)
    if sizes is not None:
        assert sizes and list(sizes) == sorted(set(sizes))
        assert all(type(s) is int and 4 <= s <= MAX_BYTES for s in sizes)


@FUZZ
@given(count=st.integers(1, 4 * 2**20), unit=st.sampled_from(["K", "k", "KiB", "KB"]))
def test_kilobytes_round_trip(count: int, unit: str) -> None:
    assert parse_size(f"{count}{unit}") == count * 2**10


@FUZZ
@given(count=st.integers(1, 4096), plain=st.integers(4, MAX_BYTES))
def test_megabytes_gigabytes_and_bytes_round_trip(count: int, plain: int) -> None:
    assert parse_size(f"{count}M") == count * 2**20
    assert parse_size(f"{count % 4 + 1}G") == (count % 4 + 1) * 2**30
    assert parse_size(str(plain)) == plain


def _human(size: int) -> str:
    for unit, scale in (("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if size % scale == 0:
            return f"{size // scale}{unit}"
    return str(size)


@FUZZ
@given(low=st.integers(2, 32), span=st.integers(0, 30))
def test_a_range_gives_every_power_of_two_in_order(low: int, span: int) -> None:
    high = min(low + span, 32)
    assert parse_sizes(f"{_human(2**low)}:{_human(2**high)}") == tuple(
        2**e for e in range(low, high + 1))


def test_default_range() -> None:
    assert parse_sizes("1K:64M") == tuple(2**e for e in range(10, 27))


@pytest.mark.parametrize("sizes", ["4Q", "9" * 5000, "64M:1K", ""],
                         ids=["4Q", "5000-digits", "backwards", "empty"])
def test_comm_with_bad_sizes_exits_2_with_one_line(capsys: pytest.CaptureFixture[str],
                                                   sizes: str) -> None:
    assert main(["comm", "--sizes", sizes]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dtbench comm: error: --sizes") and err.count("\n") == 1
    assert "Traceback" not in err
