"""The record format as a JSON Schema (record.schema.json, shipped in the package), and the
validator every record written and read goes through.

Other tools validate a record with the file alone and any Draft 2020-12 validator, e.g.
`jsonschema.validate(record, json.loads(resources.files("harness.records")
.joinpath("record.schema.json").read_text()))`.
"""
from __future__ import annotations

import json
import math
from collections.abc import Iterator
from functools import cache
from importlib import resources
from typing import Any

from harness.core.text import one_line

SCHEMA_FILE = "record.schema.json"
_DEFS = "#/$defs/"


@cache
def record_schema() -> dict[str, Any]:
    """The shipped JSON Schema of a record, parsed once."""
    text = resources.files("harness.records").joinpath(SCHEMA_FILE).read_text(encoding="utf-8")
    return json.loads(text)


def _is_finite(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int past the float range
        return False


def _inlined(node: Any, defs: dict[str, Any]) -> Any:
    """`node` with every local $ref replaced by its definition (the schema has no recursion):
    jsonschema resolves a $ref through its registry on every use, which doubled the cost."""
    if isinstance(node, list):
        return [_inlined(child, defs) for child in node]
    if not isinstance(node, dict):
        return node
    inlined = {key: _inlined(child, defs) for key, child in node.items() if key != "$ref"}
    if "$ref" in node:
        return {**_inlined(defs[node["$ref"].removeprefix(_DEFS)], defs), **inlined}
    return inlined


@cache
def record_validator() -> Any:
    """A Draft 2020-12 validator of the shipped schema, built (and the schema checked) once.

    jsonschema is imported here, not at module level: rank processes import this package but
    never validate. Arrays of finite numbers (raw samples: up to 10^5) are checked in one
    loop: jsonschema descends into each item at about 10 µs apiece.
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
                yield ValidationError(f"{shown(value)} is not a finite number", path=(index,))
                return

    plain_pattern = Draft202012Validator.VALIDATORS["pattern"]

    def pattern(validator: Any, regex: str, instance: Any, schema: dict[str, Any]
                ) -> Iterator[Any]:
        """`pattern` as JSON Schema's ECMA-262 reads it: `$` is the end of the text (Python's
        `$` also matches before a final line break, which would let "id\\n" through)."""
        found = list(plain_pattern(validator, regex, instance, schema))
        if not found and isinstance(instance, str) and regex.endswith("$") \
                and instance.endswith("\n"):
            found = [ValidationError(f"{shown(instance)} does not match {regex!r}")]
        yield from found

    fast = validators.extend(Draft202012Validator, {"items": items, "pattern": pattern})
    return fast(_inlined({k: v for k, v in schema.items() if k != "$defs"}, schema["$defs"]))


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
    """
    try:
        json.dumps(record, allow_nan=False, ensure_ascii=False).encode("utf-8")
    except (ValueError, TypeError, RecursionError):
        return one_line(_not_json(record) or "not a JSON document", 240)
    validator = record_validator()
    if validator.is_valid(record):
        return None
    from jsonschema.exceptions import best_match

    error = best_match(validator.iter_errors(record))
    return one_line(_at(error.absolute_path, error.message), 240)
