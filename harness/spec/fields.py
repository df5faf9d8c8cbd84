"""Run fields declared once: each `RunField` says how a run option is spelled on the command line
and in a suite, which spec field it fills, whether that field is part of the run's identity, and
whether the store indexes it. The command line, the suite keys, the identity key, compare's
fallback key, the store's columns, the report's columns and the documentation's table are all
functions of a field tuple.

The tuple is read off the dataclasses that hold the values (RunSpec, LaunchOptions): a field
made with `declare(default, *flags, ...)` carries its RunField in its metadata, as TorchTitan's
JobConfig and Hugging Face's HfArgumentParser keep flag and help beside the default; so the
default is written once, on the dataclass, and a derived dataclass extends every surface."""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# Marks a keyword that was not given (None is a meaningful default for several fields).
MISSING: Any = type("Missing", (), {"__repr__": lambda self: "MISSING"})()


def _int_at_least(text: str, least: int, expected: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    return _int_at_least(text, 1, "a positive integer")


def positive_float(text: str) -> float:
    """A finite number > 0 (seconds, a percentage)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    """A finite number >= 0 (epochs)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (value >= 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


# What a record's names may hold, where they become file and folder names or labels: letters,
# digits and a few marks, bounded (record.schema.json holds the same patterns, which its
# validator reads with `$` at the very end, as JSON Schema's ECMA-262 does).
RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,159}$"
MACHINE_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9 ._+#(),:/-]{0,79}$"
COMMIT_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._+/-]{0,99}$"


def _name(text: str, pattern: str, expected: str) -> str:
    if re.fullmatch(pattern.strip("^$"), text) is None:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text[:100]!r}")
    return text


def machine_name(text: str) -> str:
    """--machine NAME: a label of at most 80 letters, digits, spaces and . _ + # ( ) , : / -"""
    return _name(text, MACHINE_NAME_PATTERN, "a machine name of at most 80 letters, digits, "
                 "spaces and . _ + # ( ) , : / -, starting with a letter or digit")


def commit_name(text: str) -> str:
    """--commit SHA: a commit, tag or describe string of at most 100 letters, digits, . _ + / -"""
    return _name(text, COMMIT_PATTERN, "a commit of at most 100 letters, digits and . _ + / -, "
                 "starting with a letter or digit")


def non_negative_int(text: str) -> int:
    return _int_at_least(text, 0, "an integer >= 0")


def int_list(text: str, each: Callable[[str], int] | None = None) -> list[int]:
    """'1,2,4' -> [1, 2, 4]; each a positive integer (or as `each` reads it)."""
    parts = [p.strip() for p in text.split(",")]
    if not all(parts):
        raise argparse.ArgumentTypeError(f"expected a comma list of integers, got {text!r}")
    return [(each or positive_int)(p) for p in parts]


def count_list(text: str) -> list[int]:
    """'0,1,2' -> [0, 1, 2]; each an integer >= 0."""
    return int_list(text, non_negative_int)


@dataclass(frozen=True)
class RunField:
    """One option or spec field of a run, with every surface it appears on.

    `name` is the option's name (its suite key and argparse dest); `spec` the RunSpec field it
    fills ("" for the same name, None for none). A field with neither flags nor a suite type is
    a spec field the planner derives (world_size, env). `launch` marks options that say where
    ranks start or where records go: on the command line, never in a spec or a suite."""

    name: str
    flags: tuple[str, ...] = ()
    help: str | None = None
    type: Any = None
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    action: str | None = None
    nargs: str | None = None
    const: Any = None
    default: Any = MISSING
    # a suite file's TOML type for this key (None: not a suite key), and its least integer
    suite: type | tuple[type, ...] | None = None
    minimum: int = 1
    # repeatable: one run per value; combinations vary the highest rank fastest
    multi: int = 0
    spec: str | None = ""
    identity: bool = True
    # outside the key (records keep the key they were written with) yet never pooled with
    # another value: the views tell experiments apart by it too (the suite a run was part of)
    apart: bool = False
    # for fields added after the first records: the key leaves them out while they hold this
    key_default: Any = MISSING
    # the strategy whose option this flag sets, and which older records kept as a spec field
    strategy_option: str | None = None
    # every task's record carries it and the store indexes it; `baseline`: a one-rank run that
    # scaling efficiency divides by must have the same value (a store column too)
    store: bool = False
    baseline: bool = False
    # the store column's SQL type on a server (harness/store/postgres.py)
    store_type: str = "text"
    # position among the report's spec columns (0: not a column)
    report: int = 0
    # what a table column calls the field, where its name is not the reader's word
    heading: str | None = None
    launch: bool = False
    # the declaring dataclass's default (MISSING: none, or not a dataclass field); a help text's
    # "{default}" shows it, so the value is written once
    field_default: Any = MISSING
    # the documentation's text for the option where it says more than the help (Markdown)
    doc: str | None = None

    @property
    def spec_name(self) -> str | None:
        return self.name if self.spec == "" else self.spec

    @property
    def shown_help(self) -> str | None:
        """The help text, its "{default}" replaced by the declared default."""
        if self.help is None or "{default}" not in self.help:
            return self.help
        value = self.field_default if self.field_default is not MISSING else self.default
        return self.help.replace("{default}", f"{value:g}" if isinstance(value, float)
                                 else str(value))

    def argparse_kwargs(self, choices: Sequence[str] | None = None) -> dict[str, Any]:
        """The keywords of `add_argument` for this field's flags; `choices` where a registry
        names them (the declaration then gives none)."""
        given = {"dest": self.name if self.flags[-1].lstrip("-").replace("-", "_") != self.name
                 else None,
                 "action": "append" if self.multi and self.action is None else self.action,
                 "type": self.type, "choices": self.choices or choices, "metavar": self.metavar,
                 "nargs": self.nargs, "const": self.const, "help": self.shown_help}
        kwargs = {key: value for key, value in given.items() if value is not None}
        if self.default is not MISSING:
            kwargs["default"] = self.default
        elif self.field_default is not MISSING and self.action in ("store_true", "store_false"):
            kwargs["default"] = None  # not given: the dataclass's default, not argparse's
        return kwargs


# The metadata key under which a dataclass field holds its run-field declaration.
DECLARED = "dtbench.run_field"


def declare(default: Any = MISSING, *flags: str, option: str | None = None, newer: bool = False,
            default_factory: Callable[[], Any] | None = None, **surfaces: Any) -> Any:
    """A dataclass field that is a run field: its default, and in its metadata every other
    surface (flags, help, suite type, identity, store column ... as RunField names them).
    `option` names the flag's value where it differs from the field (nproc fills
    nproc_per_node); `newer` marks a field added after the first records, which the key
    leaves out while it holds its default (so their keys stay what they were)."""
    metadata = {DECLARED: {"flags": flags, "option": option, "newer": newer, **surfaces}}
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    if default is MISSING:
        return dataclasses.field(metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def declared_fields(cls: type) -> tuple[RunField, ...]:
    """The run fields a dataclass declares, in its field order. Every field must be declared:
    an undeclared one would have no flag, no suite key and an identity nobody decided."""
    found: list[RunField] = []
    for item in dataclasses.fields(cls):
        if DECLARED not in item.metadata:
            raise TypeError(f"{cls.__name__}.{item.name} is not a declared run field: make it "
                            "with harness.spec.fields.declare(default, *flags, ...)")
        surfaces = dict(item.metadata[DECLARED])
        option = surfaces.pop("option") or item.name
        default = (item.default if item.default is not dataclasses.MISSING
                   else item.default_factory() if item.default_factory is not dataclasses.MISSING
                   else MISSING)
        if surfaces.pop("newer"):
            surfaces["key_default"] = default
        found.append(RunField(option, spec="" if option == item.name else item.name,
                              field_default=default, **surfaces))
    return tuple(found)


def field_defaults(fields: Sequence[RunField]) -> dict[str, Any]:
    """Spec field -> its declared default (what a run gets where nothing sets it)."""
    return {f.spec_name: f.field_default for f in fields
            if f.spec_name is not None and f.field_default is not MISSING}


def add_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup,
                fields: Sequence[RunField],
                choices: Mapping[str, Sequence[str]] | None = None) -> None:
    """Every field with flags as an option of `parser`, in declared order; `choices` gives the
    names of an option whose registry lives above this layer (comm, launcher)."""
    for declared in fields:
        if declared.flags:
            parser.add_argument(*declared.flags, **declared.argparse_kwargs(
                (choices or {}).get(declared.name)))


def option_keys(fields: Sequence[RunField]) -> tuple[str, ...]:
    """The run options the command line gives (launch options apart)."""
    return tuple(f.name for f in fields if f.flags and not f.launch)


def multi_keys(fields: Sequence[RunField]) -> tuple[str, ...]:
    """Repeatable options, in the order their combinations nest."""
    return tuple(f.name for f in sorted((f for f in fields if f.multi), key=lambda f: f.multi))


def suite_keys(fields: Sequence[RunField]) -> dict[str, type | tuple[type, ...]]:
    """Suite key -> the TOML type(s) it takes."""
    return {f.name: f.suite for f in fields if f.suite is not None}


def suite_minimums(fields: Sequence[RunField]) -> dict[str, int]:
    return {f.name: f.minimum for f in fields if f.suite is not None}


def spec_fields(fields: Sequence[RunField]) -> tuple[str, ...]:
    """The names of the spec's fields (derived ones such as world_size included)."""
    return tuple(f.spec_name for f in fields if f.spec_name is not None and not f.launch)


def not_in_key(fields: Sequence[RunField]) -> tuple[str, ...]:
    """Spec fields that never make two runs different experiments."""
    return tuple(f.spec_name for f in fields
                 if f.spec_name is not None and not f.launch and not f.identity)


def experiment_fields(fields: Sequence[RunField]) -> tuple[str, ...]:
    """Spec fields that make two runs different experiments, in declared order: those of the
    key, then those kept apart beside it."""
    return tuple(f.spec_name for f in fields if f.spec_name is not None and not f.launch
                 and (f.identity or f.apart))


def apart_fields(fields: Sequence[RunField]) -> tuple[str, ...]:
    """Spec fields outside the key that still tell experiments apart."""
    return tuple(f.spec_name for f in fields
                 if f.spec_name is not None and not f.identity and f.apart)


def key_defaults(fields: Sequence[RunField]) -> dict[str, Any]:
    """Spec fields newer than the first records, with the values that reproduce their keys."""
    return {f.spec_name: f.key_default for f in fields
            if f.spec_name is not None and f.identity and f.key_default is not MISSING}


def legacy_options(fields: Sequence[RunField], strategy: str) -> dict[str, Any]:
    """Options of `strategy` that older records kept as spec fields, with their defaults."""
    return {f.name: f.key_default for f in fields if f.strategy_option == strategy}


def identity(spec: Mapping[str, Any], fields: Sequence[RunField]) -> dict[str, Any]:
    """The part of a spec (as a record stores it) that decides which experiment it is.

    Identity fields at their key_default are left out, so the key of an unchanged experiment
    stays what older records carry; ddp's legacy options count as spec fields, as they were."""
    defaults = key_defaults(fields)
    found: dict[str, Any] = {}
    for declared in fields:
        name = declared.spec_name
        if name is None or declared.launch or not declared.identity:
            continue
        if name not in spec:
            if name not in defaults:
                found[name] = None
            continue
        if not (name in defaults and spec[name] == defaults[name]):
            found[name] = spec[name]
    strategy = spec.get("strategy", defaults.get("strategy"))
    legacy = legacy_options(fields, strategy) if isinstance(strategy, str) else {}
    if legacy:
        options = found.pop("strategy_options", None)
        options = options if isinstance(options, dict) else {}
        found.update({name: options.get(name, spec.get(name, default))
                      for name, default in legacy.items()})
        found.update({k: v for k, v in options.items() if k not in legacy})
    return found


def spec_key(spec: Mapping[str, Any], fields: Sequence[RunField]) -> str:
    """A short stable hash of the spec's identity."""
    blob = json.dumps(identity(spec, fields), sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def store_columns(fields: Sequence[RunField]) -> tuple[str, ...]:
    """The spec fields the store's index holds a column for."""
    return tuple(f.spec_name for f in fields if f.store and f.spec_name is not None)


def integer_columns(fields: Sequence[RunField]) -> tuple[str, ...]:
    """The store columns a server types as integers."""
    return tuple(f.spec_name for f in fields if f.store and f.spec_name is not None
                 and f.store_type == "bigint")


def baseline_columns(fields: Sequence[RunField]) -> tuple[str, ...]:
    """The store columns a scaling baseline shares with the run it is the baseline of."""
    return tuple(f.spec_name for f in fields if f.baseline and f.spec_name is not None)


def report_columns(fields: Sequence[RunField], others: Mapping[str, int] | None = None
                   ) -> tuple[str, ...]:
    """The spec columns of the report, by position; `others` places fields of other tasks."""
    placed = {f.spec_name: f.report for f in fields if f.report and f.spec_name is not None}
    placed.update(others or {})
    return tuple(sorted(placed, key=lambda name: placed[name]))


def option_spelling(declared: RunField, choices: Sequence[str] | None = None) -> str:
    """How the documentation spells an option: its flags and what follows them, as --help
    shows it (`-n/--nproc NPROC`, `--comm none|gloo|mpi|nccl`, `--compile [off|on]`)."""
    kwargs = declared.argparse_kwargs(choices)
    flags = "/".join(declared.flags)
    if kwargs.get("action") in ("store_true", "store_false"):
        return flags
    value = ("|".join(kwargs["choices"]) if "choices" in kwargs
             else kwargs.get("metavar") or (kwargs.get("dest") or declared.flags[-1].lstrip(
                 "-").replace("-", "_")).upper())
    return f"{flags} [{value}]" if kwargs.get("nargs") == "?" else f"{flags} {value}"


def options_table(fields: Sequence[RunField],
                  choices: Mapping[str, Sequence[str]] | None = None) -> str:
    """The Markdown table of the options docs/spec/command-line.md lists for `dtbench run`, in
    declared order: each option's spelling and its documentation (the help text where the
    declaration says no more)."""
    rows = ["| option | meaning |", "|---|---|"]
    for declared in fields:
        if declared.flags:
            spelling = option_spelling(declared, (choices or {}).get(declared.name))
            text = (declared.doc or (declared.shown_help or "").replace("%%", "%"))
            rows.append(f"| `{spelling.replace('|', chr(92) + '|')}` | "
                        f"{text.replace('|', chr(92) + '|')} |")
    return "\n".join(rows) + "\n"
