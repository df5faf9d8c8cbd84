"""Suites: named sets of runs, built in or read from a user's TOML file (data only)."""
from __future__ import annotations

import itertools
import math
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from harness.core.errors import UsageError, unknown_name
from harness.spec.fields import RunField, suite_keys, suite_minimums
from harness.spec.specs import PRECISIONS, RUN_FIELDS, RunSpec, run_fields, spec_defaults

MAX_SUITE_BYTES = 1 * 2**20
MAX_SUITE_RUNS = 10_000
RUN_KEYS = suite_keys(RUN_FIELDS)
TOP_KEYS = ("name", "description", "defaults", "runs", "kernels")
KERNEL_KEYS = ("set", "precision")


@dataclass(frozen=True)
class Suite:
    """A suite's name and its runs, each a dict of run options (lists already expanded), or
    instead a `[kernels]` table: the kernel set and precisions `dtbench kernels` runs."""

    name: str
    description: str
    runs: tuple[dict[str, Any], ...]
    kernels: dict[str, Any] | None = None


def builtin_names() -> list[str]:
    folder = resources.files("harness.run") / "suites"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".toml"))


def _check_value(source: str, where: str, key: str, value: Any,
                 fields: tuple[RunField, ...] = RUN_FIELDS) -> list[Any]:
    expected = suite_keys(fields)[key]
    values = value if isinstance(value, list) else [value]
    if not values:
        raise UsageError(f"{source}: {where}.{key} is an empty list")
    for item in values:
        if expected is int and (isinstance(item, bool) or not isinstance(item, int)):
            raise UsageError(f"{source}: {where}.{key} must be an integer, got {item!r}")
        if expected == (int, float) and (isinstance(item, bool) or not isinstance(
                item, int | float) or not (item > 0 and math.isfinite(item))):
            raise UsageError(f"{source}: {where}.{key} must be a number > 0, got {item!r}")
        if expected is not int and not isinstance(item, expected):
            names = " or ".join(t.__name__ for t in
                                (expected if isinstance(expected, tuple) else (expected,)))
            raise UsageError(f"{source}: {where}.{key} must be a {names}, got {item!r}")
        minimum = suite_minimums(fields)[key]
        if expected is int and item < minimum:
            raise UsageError(f"{source}: {where}.{key} must be "
                             f"{'>= 0' if minimum == 0 else 'positive'}, got {item}")
    return values


def _check_keys(source: str, where: str, table: Any, valid: Iterable[str]) -> None:
    """`table` is a TOML table whose keys are all among `valid`."""
    if not isinstance(table, dict):
        raise UsageError(f"{source}: {where} must be a table")
    unknown = sorted(set(table) - set(valid))
    if unknown:
        raise UsageError(f"{source}: unknown key {unknown[0]!r} in {where}; valid keys: "
                         f"{', '.join(sorted(valid))}")


def _check_table(source: str, where: str, table: Any,
                 fields: tuple[RunField, ...] = RUN_FIELDS) -> dict[str, list[Any]]:
    _check_keys(source, where, table, suite_keys(fields))
    return {key: _check_value(source, where, key, value, fields) for key, value in table.items()}


def _check_kernels(source: str, table: Any) -> dict[str, Any]:
    """A `[kernels]` table: `set` (a kernel set name) and optional `precision` (a list)."""
    from harness.microbench.kernels.sets import SETS

    _check_keys(source, "kernels", table, KERNEL_KEYS)
    if table.get("set") not in SETS:
        raise UsageError(f"{source}: kernels.set must be one of {', '.join(SETS)}, got "
                         f"{table.get('set')!r}")
    precisions = table.get("precision", [spec_defaults()["precision"]])
    precisions = precisions if isinstance(precisions, list) else [precisions]
    if not precisions or not all(p in PRECISIONS for p in precisions):
        raise UsageError(f"{source}: kernels.precision must be one or a list of "
                         f"{', '.join(PRECISIONS)}, got {table.get('precision')!r}")
    return {"set": table["set"], "precision": precisions}


def parse_suite(text: str, source: str, default_name: str,
                spec_class: type[RunSpec] = RunSpec) -> Suite:
    """Parse and validate a suite document; every problem is a one-line UsageError. Its keys
    are the run fields `spec_class` declares with a suite type."""
    fields = run_fields(spec_class)
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{source}: not valid TOML ({exc})") from None
    except RecursionError:
        raise UsageError(f"{source}: not valid TOML (arrays or tables nested too deeply)") from None
    unknown = sorted(set(document) - set(TOP_KEYS))
    if unknown:
        raise UsageError(f"{source}: unknown top-level key {unknown[0]!r}; valid keys: "
                         f"{', '.join(TOP_KEYS)}")
    name = document.get("name", default_name)
    description = document.get("description", "")
    if not isinstance(name, str) or not name or not isinstance(description, str):
        raise UsageError(f"{source}: name and description must be strings")
    if "kernels" in document:
        if "runs" in document or "defaults" in document:
            raise UsageError(f"{source}: a suite has [[runs]] or a [kernels] table, not both")
        return Suite(name=name, description=description, runs=(),
                     kernels=_check_kernels(source, document["kernels"]))
    defaults = _check_table(source, "defaults", document.get("defaults", {}), fields)
    runs = document.get("runs")
    if not isinstance(runs, list) or not runs:
        raise UsageError(f"{source}: a suite needs at least one [[runs]] table")
    expanded: list[dict[str, Any]] = []
    for index, entry in enumerate(runs):
        table = {**defaults, **_check_table(source, f"runs[{index}]", entry, fields)}
        if "workload" not in table:
            raise UsageError(f"{source}: runs[{index}] has no workload")
        keys = list(table)
        count = math.prod(len(table[k]) for k in keys)
        if len(expanded) + count > MAX_SUITE_RUNS:
            raise UsageError(f"{source}: the suite expands to more than {MAX_SUITE_RUNS} runs; "
                             "split it into smaller suites")
        for combination in itertools.product(*(table[k] for k in keys)):
            expanded.append(dict(zip(keys, combination, strict=True)))
    return Suite(name=name, description=description, runs=tuple(expanded))


def load_suite(name_or_path: str) -> Suite:
    """A built-in suite by name, or a TOML file by path."""
    if name_or_path in builtin_names():
        resource = resources.files("harness.run") / "suites" / f"{name_or_path}.toml"
        return parse_suite(resource.read_text(encoding="utf-8"), f"suite {name_or_path}",
                           name_or_path)
    path = Path(name_or_path)
    if not path.suffix and not path.exists():
        raise UsageError(unknown_name("suite", name_or_path, builtin_names(),
                                      ", or give a .toml file"))
    try:
        size = path.stat().st_size
        if size > MAX_SUITE_BYTES:
            raise UsageError(f"suite {path}: {size} bytes is over the "
                             f"{MAX_SUITE_BYTES}-byte limit")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"suite {path}: no such file") from None
    except UnicodeDecodeError:
        raise UsageError(f"suite {path}: not UTF-8 text") from None
    except OSError as exc:
        raise UsageError(f"suite {path}: cannot read ({exc.strerror or exc})") from None
    return parse_suite(text, f"suite {path}", path.stem)
