"""The schema says what is physical (issue 52 item 1): every number it allows is bounded, every
text bounded and free of control characters, every open part held to the same bounds; dtbench's
fast validator and plain jsonschema agree on each bound; what a run writes is kept within them."""
from __future__ import annotations

import copy
import datetime as dt
import json
import math
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from harness.records.record import Metric, build_record, check_record
from harness.records.schema import OPEN_VALUE, bounds, first_violation, record_schema

GOLDEN = json.loads((Path(__file__).resolve().parents[1] / "golden" / "record_v1.json")
                    .read_text(encoding="utf-8"))
PLAIN = Draft202012Validator(record_schema())


def _nodes(node: Any, where: str, defs: dict[str, Any], seen: frozenset[str] = frozenset()
           ) -> list[tuple[str, dict[str, Any]]]:
    """Every sub-schema with its place, each $ref merged into the node that names it."""
    if isinstance(node, list):
        return [found for i, child in enumerate(node) for found in _nodes(child, where, defs,
                                                                         seen)]
    if not isinstance(node, dict):
        return []
    ref = node.get("$ref")
    if ref is not None:
        if ref in seen:
            return []
        node = {**defs[ref.rsplit("/", 1)[1]], **{k: v for k, v in node.items() if k != "$ref"}}
        seen = seen | {ref}
    found = [(where, node)]
    for key, child in node.items():
        if key in ("properties", "$defs"):
            found += [f for name, sub in child.items()
                      for f in _nodes(sub, f"{where}.{name}", defs, seen)]
        elif key in ("items", "additionalProperties", "propertyNames", "anyOf", "allOf",
                     "then", "if"):
            found += _nodes(child, f"{where}/{key}", defs, seen)
    return found


SCHEMA_NODES = _nodes({k: v for k, v in record_schema().items() if k != "$defs"}, "record",
                      record_schema()["$defs"])


def _types(node: dict[str, Any]) -> set[str]:
    kind = node.get("type", [])
    return set(kind if isinstance(kind, list) else [kind])


def test_every_number_the_schema_allows_is_bounded() -> None:
    loose = [where for where, node in SCHEMA_NODES
             if _types(node) & {"number", "integer"} and "/if" not in where
             and not ({"minimum", "maximum"} <= node.keys() or "const" in node)]
    assert loose == []


def test_every_text_the_schema_allows_is_bounded_and_free_of_control_characters() -> None:
    loose = [where for where, node in SCHEMA_NODES
             if "string" in _types(node) and "/if" not in where and "anyOf" not in node
             and not ("maxLength" in node and "pattern" in node)
             and "enum" not in node and "const" not in node]
    assert loose == []


def test_every_object_holds_its_other_keys_to_the_bounds() -> None:
    """No open object takes any JSON: its other keys are open values, or held to a bounded
    schema (walked above), or not allowed."""
    loose = [where for where, node in SCHEMA_NODES
             if "object" in _types(node) and "/if" not in where and "/then" not in where
             and "anyOf" not in node and "additionalProperties" not in node]
    assert loose == []
    assert record_schema()["additionalProperties"] == {"$ref": OPEN_VALUE}


def _set(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    record = copy.deepcopy(GOLDEN)
    node = record
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return record


LIMIT = 1e30
# (place, a value just inside a bound, one just outside): dtbench's fast paths (arrays of
# numbers, open values, keys, texts) against plain jsonschema
EDGES = [
    (("metrics", 0, "samples"), [0.01, LIMIT], [0.01, 1.0000001e30]),
    (("metrics", 0, "samples"), [0.01, -LIMIT], [0.01, -10**31]),
    (("notes", "deep"), {"a": [[{"b": LIMIT}]]}, {"a": [[{"b": 10**31}]]}),
    (("notes", "text"), "tab\tand\nline feed", "escape \x1b[2J"),
    (("notes", "text"), "x" * 65_536, "x" * 65_537),
    (("notes", "k" * 256), 1, 1),
    (("notes", "bidi"), "ab", "a\u202eb"),
    (("notes", "c1"), "é", "\x85"),
    (("spec", "env"), {"OMP_NUM_THREADS": "4"}, {"OMP\x00": "4"}),
    (("spec", "world_size"), 2**24, 2**24 + 1),
    (("metrics", 0, "value"), 0.0, -1e-9),  # step_time is in s: never negative
    (("metrics", 0, "name"), "n" * 256, "n" * 257),
    (("events",), [{"key": "k", "event_type": "event", "time_ms": 2**53}],
     [{"key": "k", "event_type": "event", "time_ms": 2**53 + 1}]),
]


@pytest.mark.parametrize(("path", "inside", "outside"), EDGES,
                         ids=[f"{'.'.join(map(str, p))[:30]}" for p, _, _ in EDGES])
def test_dtbench_and_plain_jsonschema_agree_on_each_bound(path: tuple[Any, ...], inside: Any,
                                                          outside: Any) -> None:
    taken = _set(path, inside)
    assert first_violation(taken) is None and PLAIN.is_valid(taken)
    refused = _set(path, outside) if path[-1] != "k" * 256 else \
        _set((*path[:-1], "k" * 257), outside)
    assert first_violation(refused) is not None and not PLAIN.is_valid(refused)


def test_a_record_a_run_builds_from_hostile_text_and_numbers_is_valid() -> None:
    """What a run writes comes from outside too (a rank's error with colours, /proc/cpuinfo,
    a diverged value): build_record keeps it within the bounds instead of failing the run."""
    record = build_record(
        run_id="20260102T030405Z-hep_cnn-0a1b2c3d",
        created=dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC), status="failed",
        error="\x1b[31mRuntimeError\x1b[0m: diverged\u202e",
        harness={"version": "t"}, machine={"cpu_model": "x\x00y", "odd\x07key": math.inf},
        software={}, spec={**GOLDEN["spec"], "note": "z" * 70_000},
        metrics=[Metric("step_time", "s", 10**400, False, samples=[0.1, 0.2])],
        events=[], extra={"notes": {"huge": 10**31, "nested": [{"x": -math.inf}]}})
    check_record(record)
    assert record["error"] == "[31mRuntimeError[0m: diverged"
    assert record["machine"] == {"cpu_model": "xy", "oddkey": None}
    assert len(record["spec"]["note"]) == bounds().text
    assert record["metrics"][0]["value"] is None
    assert record["notes"] == {"huge": None, "nested": [{"x": None}]}
