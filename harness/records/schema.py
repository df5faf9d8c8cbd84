"""The record format as a JSON Schema (record.schema.json, shipped in the package), and the
validator every record written and read goes through.

Other tools validate a record with the file alone and any Draft 2020-12 validator, e.g.
`jsonschema.validate(record, json.loads(resources.files("harness.records")
.joinpath("record.schema.json").read_text()))`.
"""
from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from harness.core.text import one_line

SCHEMA_FILE = "record.schema.json"
_DEFS = "#/$defs/"
# The open value (harness/records/record.schema.json's `json`): recursive, so never inlined;
# validated by one walk in Python (bounds) instead of jsonschema's descent.
OPEN_VALUE = _DEFS + "json"


@cache
def record_schema() -> dict[str, Any]:
    """The shipped JSON Schema of a record, parsed once."""
    text = resources.files("harness.records").joinpath(SCHEMA_FILE).read_text(encoding="utf-8")
    return json.loads(text)


@dataclass(frozen=True)
class Bounds:
    """What the schema's `finite`, `text` and `name` definitions allow, read from the schema
    (declared once there): the largest magnitude of a number, the longest text and name, and
    the characters no text holds."""

    number: float
    text: int
    name: int
    forbidden: re.Pattern[str]


@cache
def bounds() -> Bounds:
    defs = record_schema()["$defs"]
    pattern = defs["text"]["pattern"]  # ^[^CLASS]*$: no character of CLASS
    assert pattern.startswith("^[^") and pattern.endswith("]*$"), pattern
    return Bounds(float(defs["finite"]["maximum"]), int(defs["text"]["maxLength"]),
                  int(defs["name"]["maxLength"]), re.compile(f"[{pattern[3:-3]}]"))


def _is_finite(value: Any) -> bool:
    """A number within the schema's bound (a bool, NaN, an infinity or a huge integer is not)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    limit = bounds().number
    return -limit <= value <= limit  # exact for integers of any size; False for NaN


def _text_problem(text: str, limit: int) -> str | None:
    if len(text) > limit:
        return f"a text of {len(text)} characters, more than {limit}"
    found = bounds().forbidden.search(text)
    if found:
        return f"a control character ({ascii(found.group())}) in {shown(text)}"
    return None


def open_violation(value: Any) -> tuple[tuple[Any, ...], str] | None:
    """The first place in an open value (schema `json`) outside its bounds, and why; None
    where it keeps to them. One walk, no recursion: 10^5 samples in a metric's extras cost
    milliseconds here, seconds through jsonschema."""
    limits = bounds()
    stack: list[tuple[tuple[Any, ...], Any]] = [((), value)]
    while stack:
        path, node = stack.pop()
        if node is None or isinstance(node, bool):
            continue
        if isinstance(node, int | float):
            if not _is_finite(node):
                return path, f"{shown(node)} is not a finite number within ±{limits.number:g}"
        elif isinstance(node, str):
            problem = _text_problem(node, limits.text)
            if problem:
                return path, problem
        elif isinstance(node, list):
            stack.extend(((*path, index), child) for index, child in enumerate(node))
        elif isinstance(node, dict):
            for key, child in node.items():
                problem = _text_problem(key, limits.name) if isinstance(key, str) else \
                    "a key that is not text"
                if problem:
                    return path, f"key: {problem}"
                stack.append(((*path, key), child))
        else:
            return path, f"{shown(node)} is not a JSON value"
    return None


def _inlined(node: Any, defs: dict[str, Any]) -> Any:
    """`node` with every local $ref replaced by its definition, but the recursive open value's
    (validated by open_violation): jsonschema resolves a $ref through its registry on every
    use, which doubled the cost."""
    if isinstance(node, list):
        return [_inlined(child, defs) for child in node]
    if not isinstance(node, dict):
        return node
    inlined = {key: _inlined(child, defs) for key, child in node.items() if key != "$ref"}
    if "$ref" in node and node["$ref"] != OPEN_VALUE:
        return {**_inlined(defs[node["$ref"].removeprefix(_DEFS)], defs), **inlined}
    return {**inlined, "$ref": node["$ref"]} if "$ref" in node else inlined


@cache
def record_validator() -> Any:
    """A Draft 2020-12 validator of the shipped schema, built (and the schema checked) once.

    jsonschema is imported here, not at module level: rank processes import this package but
    never validate. Arrays of finite numbers (raw samples: up to 10^5) and open values are
    checked in one loop: jsonschema descends into each item at about 10 µs apiece.
    """
    from jsonschema import Draft202012Validator, ValidationError, validators

    schema = record_schema()
    Draft202012Validator.check_schema(schema)
    finite = _inlined(schema["$defs"]["finite"], schema["$defs"])
    plain_items = Draft202012Validator.VALIDATORS["items"]

    def items(validator: Any, item_schema: Any, instance: Any,
              schema: dict[str, Any]) -> Iterator[Any]:
        if item_schema != finite or not isinstance(instance, list):
            yield from plain_items(validator, item_schema, instance, schema)
            return
        for index, value in enumerate(instance):
            if not _is_finite(value):
                yield ValidationError(f"{shown(value)} is not a finite number within "
                                      f"±{bounds().number:g}", path=(index,))
                return

    plain_ref = Draft202012Validator.VALIDATORS["$ref"]

    def ref(validator: Any, ref: str, instance: Any, schema: dict[str, Any]
            ) -> Iterator[Any]:
        if ref != OPEN_VALUE:
            yield from plain_ref(validator, ref, instance, schema)
            return
        found = open_violation(instance)
        if found is not None:
            yield ValidationError(found[1], path=found[0])

    plain_additional = Draft202012Validator.VALIDATORS["additionalProperties"]

    def additional(validator: Any, extra: Any, instance: Any, schema: dict[str, Any]
                   ) -> Iterator[Any]:
        """An open object's other keys, each an open value, walked without a descent each."""
        if extra != {"$ref": OPEN_VALUE} or not isinstance(instance, dict) \
                or "patternProperties" in schema:
            yield from plain_additional(validator, extra, instance, schema)
            return
        pinned = schema.get("properties", {})
        for key, value in instance.items():
            if key not in pinned:
                found = open_violation(value)
                if found is not None:
                    yield ValidationError(found[1], path=(key, *found[0]))
                    return

    plain_all = Draft202012Validator.VALIDATORS["allOf"]

    def all_of(validator: Any, rules: Any, instance: Any, schema: dict[str, Any]
               ) -> Iterator[Any]:
        """A metric's value in its unit's range (the rules "where K is one of E, V is at
        least M") checked in Python: jsonschema's if/then descends five times a metric."""
        ranges = [_range_rule(rule) for rule in rules]
        if None in ranges or not isinstance(instance, dict):
            yield from plain_all(validator, rules, instance, schema)
            return
        for key, among, value, least in ranges:
            found = instance.get(value)
            kind = instance.get(key)
            if isinstance(kind, str) and kind in among and _is_finite(found) and found < least:
                yield ValidationError(f"{found!r} is less than the minimum of {least!r}",
                                      path=(value,))

    plain_names = Draft202012Validator.VALIDATORS["propertyNames"]
    name = _inlined(schema["$defs"]["name"], schema["$defs"])
    text_pattern = schema["$defs"]["text"]["pattern"]

    def property_names(validator: Any, names: Any, instance: Any, schema: dict[str, Any]
                       ) -> Iterator[Any]:
        """Keys as names, checked in one loop (jsonschema's descent per key tripled the cost
        of a record)."""
        if names != name or not isinstance(instance, dict):
            yield from plain_names(validator, names, instance, schema)
            return
        for key in instance:
            problem = _text_problem(key, bounds().name)
            if problem:
                yield ValidationError(f"key: {problem}")
                return

    plain_pattern = Draft202012Validator.VALIDATORS["pattern"]

    def pattern(validator: Any, regex: str, instance: Any, schema: dict[str, Any]
                ) -> Iterator[Any]:
        """`pattern` as JSON Schema's ECMA-262 reads it: `$` is the end of the text (Python's
        `$` also matches before a final line break, which would let "id\\n" through); a text's
        (no control character) by one search."""
        if regex == text_pattern and isinstance(instance, str):
            found = bounds().forbidden.search(instance)
            if found:
                yield ValidationError(f"a control character ({ascii(found.group())}) in "
                                      f"{shown(instance)}")
            return
        found = list(plain_pattern(validator, regex, instance, schema))
        if not found and isinstance(instance, str) and regex.endswith("$") \
                and instance.endswith("\n") and not re.search(regex[:-1] + r"\Z", instance):
            found = [ValidationError(f"{shown(instance)} does not match {regex!r}")]
        yield from found

    fast = validators.extend(Draft202012Validator, {"items": items, "pattern": pattern,
                                                    "$ref": ref,
                                                    "propertyNames": property_names,
                                                    "additionalProperties": additional,
                                                    "allOf": all_of})
    return fast(_inlined({k: v for k, v in schema.items() if k != "$defs"}, schema["$defs"]))


def _range_rule(rule: Any) -> tuple[str, frozenset[Any], str, float] | None:
    """(K, E, V, M) of a rule {"if": {"required": [K], "properties": {K: {"enum": E}}},
    "then": {"properties": {V: {"minimum": M}}}}, else None."""
    try:
        (key, when), = rule["if"]["properties"].items()
        (value, then), = rule["then"]["properties"].items()
        if rule["if"].get("required") != [key] or set(when) != {"enum"} \
                or set(then) != {"minimum"} or set(rule) != {"if", "then"}:
            return None
        return key, frozenset(when["enum"]), value, float(then["minimum"])
    except (AttributeError, KeyError, TypeError, ValueError):
        return None


def shown(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return "a huge integer"
    return one_line(repr(value), 60)


def where(path: Any) -> str:
    """A location inside a record as a reader writes it: metrics[0].stats.median."""
    text = ""
    for key in path:
        text += f"[{key}]" if isinstance(key, int) else f".{key}"
    return text.lstrip(".")


def _at(path: Any, message: str) -> str:
    place = where(path)
    return f"{place}: {message}" if place else message


def _not_json(node: Any, path: tuple[Any, ...] = ()) -> str | None:
    """The first value JSON cannot carry (NaN, Infinity, a lone surrogate), with its place."""
    if isinstance(node, float) and not math.isfinite(node):
        return _at(path, f"{node} is not a JSON number (write null)")
    if isinstance(node, str):
        try:
            node.encode("utf-8")
        except UnicodeEncodeError:
            return _at(path, f"{shown(node)} is not valid Unicode (a lone surrogate)")
        return None
    items = node.items() if isinstance(node, dict) else (
        enumerate(node) if isinstance(node, list | tuple) else ())
    for key, child in items:
        found = _not_json(key, path) if isinstance(key, str) else None
        found = found or _not_json(child, (*path, key))
        if found:
            return found
    return None


def first_violation(record: Any) -> str | None:
    """What makes `record` invalid, on one line with its place (metrics[0].value: ...), or None.

    JSON Schema describes JSON values; NaN, Infinity and lone surrogates are not JSON (RFC 8259)
    although Python's json module reads and writes them, so they are rejected before the schema:
    one C-speed serialisation decides, and only a failure walks the record to name the place.
    A record of more metrics than the schema allows is refused before any is validated.
    """
    most = record_schema()["properties"]["metrics"]["maxItems"]
    metrics = record.get("metrics") if isinstance(record, dict) else None
    if isinstance(metrics, list) and len(metrics) > most:
        return f"metrics: {len(metrics)} metrics, more than the {most} a record may hold"
    try:
        json.dumps(record, allow_nan=False, ensure_ascii=False).encode("utf-8")
    except (ValueError, TypeError, RecursionError):
        return one_line(_not_json(record) or "not a JSON document", 240)
    validator = record_validator()
    if validator.is_valid(record):
        return None
    from jsonschema.exceptions import best_match

    error = best_match(validator.iter_errors(record))
    message = error.message
    if isinstance(error.instance, int | float | str) and len(repr(error.instance)) > 60:
        message = message.replace(repr(error.instance), shown(error.instance))
    return one_line(_at(error.absolute_path, message), 240)


def storable(value: Any) -> Any:
    """A copy of a value bound for a record, kept within the schema's bounds for any value: a
    NaN, an infinity or a number past the bound becomes null; a text loses its control
    characters (but tab and line feed) and is cut to the longest text, a key to the longest
    name. What a run writes comes from outside too (a rank's error, /proc/cpuinfo, the
    environment), and a record the schema refuses would cost the run."""
    limits = bounds()
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return value if _is_finite(value) else None
    if isinstance(value, str):
        return limits.forbidden.sub("", value)[:limits.text]
    if isinstance(value, dict):
        return {limits.forbidden.sub("", str(key))[:limits.name]: storable(child)
                for key, child in value.items()}
    if isinstance(value, list | tuple):
        return [storable(child) for child in value]
    return value
