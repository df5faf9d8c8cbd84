"""Records generated from the shipped JSON Schema (harness/records/record.schema.json), for the
fuzzing of every reader (tests/harness/test_fuzz_readers.py).

hypothesis-jsonschema draws each leaf (a number, a text, an array of numbers, an open value)
from the schema's own definition of it; the objects the schema pins (the record, its spec,
machine, metrics, trajectory, ...) are composed here from their properties, because
hypothesis-jsonschema canonicalises every sub-schema anew on each draw of an object (0.6 s a
record, against milliseconds this way). Names are steered towards what readers look for:
metric names from the catalogue, known workloads and tasks, and, in every open object, the
keys readers read (a quality metric's `target`, a collective's `per_size`, an interconnect's
`speed_mbps`, ...) with values drawn from the schema's open value. Every record drawn is
valid against the schema by construction; the tests check it again with check_record.
"""
from __future__ import annotations

import copy
import re
from functools import cache
from typing import Any

from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema

from harness.facts.metrics import CATALOGUE
from harness.records.schema import record_schema

OPEN_REF = "#/$defs/json"
# The longest text drawn: a record's choices must fit hypothesis's buffer (8,192 choices a
# test case, a character each), several records to a store; long texts are the fixed cases'
# (tests/harness/hostile_store.py).
LONGEST = 24
# How deep an open value nests in a generated record (the schema's own has no depth limit).
OPEN_DEPTH = 2
WORKLOADS = ("hep_cnn", "lstm", "gpt", "alexnet", "resnet50", "comm-allreduce", "gemm")
TASKS = ("train", "comm", "kernel", "prediction")
METRIC_NAMES = tuple(info.name for info in CATALOGUE if not info.family) + (
    "comm_bytes_allreduce", "phase_forward", "doctor_gemm", "accuracy")
UNITS = ("s", "samples/s", "bytes", "FLOP", "FLOP/s", "1", "GB/s", "B/s", "tokens/s",
         "samples", "J", "W", "percent")
# Keys readers look up in the open objects of a record, by where the object is.
READER_KEYS: dict[tuple[str, ...], tuple[str, ...]] = {
    ("metrics", "[]"): ("per_size", "per_rank", "kind", "interval_pct"),
    ("machine",): ("interconnect", "cpu_vendor", "gpus", "sockets", "name", "per_node"),
    ("machine", "interconnect"): ("type", "speed_mbps", "interface"),
    ("spec",): ("op", "kernel", "family", "pass", "algorithm", "shape", "data",
                "loader_workers", "sizes", "network", "calibration"),
    ("notes",): ("measurement", "traces", "traceback_tail", "settings"),
    ("trajectory", "evaluations", "[]"): ("step", "seconds", "samples", "quality"),
}


def _defs() -> dict[str, Any]:
    return record_schema().get("$defs", {})


def _resolved(node: dict[str, Any]) -> dict[str, Any]:
    """`node` with its $ref merged in (but the open value's, which stays a reference)."""
    ref = node.get("$ref")
    if ref is None or ref == OPEN_REF:
        return node
    rest = {key: value for key, value in node.items() if key != "$ref"}
    return {**_resolved(_defs()[ref.rsplit("/", 1)[1]]), **rest}


def _plain(node: Any) -> Any:
    """A leaf's schema with every $ref inlined (hypothesis-jsonschema fetches no `urn:` base),
    its texts at most LONGEST characters; a leaf holds no open value."""
    if isinstance(node, list):
        return [_plain(child) for child in node]
    if not isinstance(node, dict):
        return node
    node = _resolved(node)
    return {key: _plain(child) for key, child in node.items()
            if key not in ("$defs", "$id", "$schema", "description")}


def _leaf(node: dict[str, Any]) -> st.SearchStrategy[Any]:
    """hypothesis-jsonschema's values of a leaf; a text (the schema's `text` and `name`: no
    forbidden character, at most maxLength) drawn directly, at most LONGEST characters
    (hypothesis-jsonschema filters its pattern's draws by length, which rejects most)."""
    plain = _plain(node)
    text = _defs().get("text", {}).get("pattern")
    if text is None or plain.get("pattern") != text:
        return from_schema(plain)
    kinds = plain.get("type", "string")
    kinds = set(kinds if isinstance(kinds, list) else [kinds])
    forbidden = re.compile(f"[{plain['pattern'][3:-3]}]")  # ^[^CLASS]*$: none of CLASS
    characters = st.characters(exclude_categories=("Cs", "Cc", "Cf", "Zl", "Zp"),
                               include_characters="\t\n")  # the forbidden class, and more
    texts = st.text(characters.filter(lambda char: forbidden.match(char) is None),
        max_size=min(plain.get("maxLength", LONGEST), LONGEST))
    rest = {**plain, "type": sorted(kinds - {"string"})}
    return texts | from_schema(rest) if rest["type"] else texts


@cache
def _open_values(kinds: frozenset[str] | None = None) -> st.SearchStrategy[Any]:
    """The schema's open value (of the JSON types `kinds`, all where None): its scalars (null,
    booleans, `finite` numbers, `text`) drawn by hypothesis-jsonschema from their definitions,
    nested in arrays and objects (`name` keys) as the definition's recursion allows; any JSON
    before the schema bounded open values. Composed here: hypothesis-jsonschema unrolling the
    recursion took seconds a record."""
    defs = _defs()
    if "json" not in defs:
        return from_schema({} if kinds is None else {"type": sorted(kinds)})
    keys = _leaf({"type": "string", "$ref": "#/$defs/name"})
    branches = {"null": st.none(), "boolean": st.booleans(),
                "number": from_schema(_plain({"$ref": "#/$defs/finite"})),
                "string": _leaf({"type": "string", "$ref": "#/$defs/text"})}
    nested = st.recursive(st.one_of(list(branches.values())), lambda children: st.lists(
        children, max_size=3) | st.dictionaries(keys, children, max_size=2), max_leaves=8)
    if kinds is None:
        return nested
    branches.update(array=st.lists(nested, max_size=3),
                    object=st.dictionaries(keys, nested, max_size=3))
    return st.one_of([branches[kind] for kind in sorted(kinds) if kind in branches])


def _steered(path: tuple[str, ...], drawn: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Known names for the fields readers branch on, beside what the schema allows."""
    choices = {("status",): ("success", "success", "success", "failed", "skipped"),
               ("spec", "workload"): WORKLOADS, ("spec", "task"): TASKS,
               ("metrics", "[]", "name"): METRIC_NAMES, ("metrics", "[]", "unit"): UNITS}
    if path in choices:
        return st.sampled_from(choices[path]) | drawn
    return drawn


def _ruled(node: dict[str, Any], path: tuple[str, ...],
           fixed: dict[str, st.SearchStrategy[Any]],
           optional: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """The object drawn within its `allOf` rules, each of the form "where K is one of E, V is
    also held to T" (a metric's value in its unit's range): K from E and V under T, or K
    absent or anything else; a draw never breaks a rule, so none is thrown away."""
    drawn = st.fixed_dictionaries(fixed, optional=optional)
    for rule in node.get("allOf", []):
        (key, when), = rule["if"]["properties"].items()
        (value, then), = rule["then"]["properties"].items()
        ruled = strategy({**node["properties"][value], **then}, (*path, value))
        within = st.fixed_dictionaries(
            {**fixed, key: st.sampled_from(when["enum"]), value: ruled},
            optional={k: v for k, v in optional.items() if k not in (key, value)})
        others = [unit for unit in UNITS if unit not in when["enum"]]
        elsewhere = (st.sampled_from(others) if others else st.nothing()) | _leaf(
            node["properties"][key]).filter(lambda found, e=when["enum"]: found not in e)
        outside = st.fixed_dictionaries(fixed, optional={**optional, key: elsewhere})
        drawn = within | outside
    return drawn


def strategy(node: dict[str, Any], path: tuple[str, ...] = ()) -> st.SearchStrategy[Any]:
    """Values of the schema `node` at `path` in a record."""
    if node.get("$ref") == OPEN_REF:
        kinds = node.get("type")
        return _open_values(None if kinds is None else frozenset(
            kinds if isinstance(kinds, list) else [kinds]))
    node = _resolved(node)
    properties = node.get("properties")
    types = node.get("type") if isinstance(node.get("type"), list) else [node.get("type")]
    if isinstance(properties, dict) and ("object" in types or types == [None]):
        required = node.get("required", [])
        fixed = {key: strategy(properties[key], (*path, key)) for key in required}
        optional = {key: strategy(value, (*path, key)) for key, value in properties.items()
                    if key not in required}
        extra = node.get("additionalProperties", True)
        if extra is not False:
            values = strategy(extra, (*path, "*")) if isinstance(extra, dict) \
                else _open_values()
            optional.update({key: values for key in READER_KEYS.get(path, ())
                             if key not in properties})
        drawn = _ruled(node, path, fixed, optional)
        return _steered(path, drawn | st.none() if "null" in types else drawn)
    if "object" in types and path in READER_KEYS:  # an open object readers look into
        drawn = st.fixed_dictionaries({}, optional={key: _open_values()
                                                    for key in READER_KEYS[path]})
        return drawn | st.none() if "null" in types else drawn
    items = node.get("items")
    if "array" in types and isinstance(items, dict):
        least = node.get("minItems", 0)
        drawn = st.lists(strategy(items, (*path, "[]")), min_size=least,
                         max_size=max(least, min(node.get("maxItems", 4), 4)))
        return drawn | st.none() if "null" in types else drawn
    if "object" in types and isinstance(node.get("additionalProperties"), dict):
        keys = _leaf({"type": "string", **node.get("propertyNames", {})})
        drawn = st.dictionaries(keys, strategy(node["additionalProperties"], (*path, "*")),
                                max_size=3)
        return drawn | st.none() if "null" in types else drawn
    return _steered(path, _leaf(node))


@cache
def records() -> st.SearchStrategy[dict[str, Any]]:
    """Schema-valid records (copied on every draw: no draw shares a list with another)."""
    return strategy(record_schema()).map(copy.deepcopy)
