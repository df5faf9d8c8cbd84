"""A strategy's options, declared on its class: name, type, default, help, bounds, choices,
aliases, and whether it is only an assumption of the step-time model. `run` and `predict`
both resolve options through these declarations (Strategy.resolve_options)."""
from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from harness.core.errors import UsageError
from harness.spec.fields import RunField


@dataclass(frozen=True)
class Option:
    """One option a strategy takes: `--strategy-opt NAME=VALUE` (or one of its aliases).

    `assumption`, when set, says why a run cannot be told this value: the option is a premise
    of the step-time model (`dtbench predict`) only, and `run` rejects it. `priced` is False
    for an option the step-time model takes but does not price (the optimizer's momentum)."""

    name: str
    kind: type
    default: Any
    help: str
    minimum: float | None = None
    choices: tuple[Any, ...] | None = None
    aliases: tuple[str, ...] = ()
    assumption: str = ""
    priced: bool = True

    @property
    def names(self) -> tuple[str, ...]:
        """The name and its aliases: every key `--strategy-opt` accepts for it."""
        return (self.name, *self.aliases)

    def parse(self, value: Any, strategy: str) -> Any:
        """The typed value, or UsageError saying what is expected."""
        where = f"--strategy-opt {self.name} of {strategy}"
        if isinstance(value, str) and self.kind is not str:
            text = value.strip()
            try:
                if self.kind is bool:
                    if text.lower() not in TRUE + FALSE:
                        raise ValueError(text)
                    value = text.lower() in TRUE
                elif self.kind is float and text.lower() in ("inf", "infinity"):
                    value = math.inf
                else:
                    value = self.kind(text)
            except ValueError:
                raise UsageError(f"{where}: expected {self.kind.__name__}, got {value!r}") from None
        elif self.kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, self.kind) or (self.kind is int and isinstance(value, bool)):
            raise UsageError(f"{where}: expected {self.kind.__name__}, got {value!r}")
        if self.choices is not None and value not in self.choices:
            raise UsageError(f"{where}: {value!r} is not one of "
                             f"{', '.join(map(str, self.choices))}")
        if self.minimum is not None and value < self.minimum:
            raise UsageError(f"{where} must be >= {self.minimum:g}, got {value}")
        return value


TRUE, FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def field_option(fields: Iterable[RunField], strategy: str, name: str,
                 aliases: tuple[str, ...] = ()) -> Option:
    """The option of `strategy` that a run field declares (a flag older than --strategy-opt,
    such as ddp's --bucket-mb): its name, type, default, help, bound and choices read off
    that one declaration (harness/spec/specs.py), so the two surfaces cannot disagree."""
    found = next((f for f in fields if f.name == name and f.strategy_option == strategy), None)
    if found is None or not isinstance(found.suite, type):
        raise TypeError(f"no run field {name!r} declares an option of {strategy}")
    numeric = found.suite in (int, float)
    return Option(found.name, found.suite, found.key_default, found.shown_help or "",
                  minimum=found.minimum if numeric else None, choices=found.choices,
                  aliases=aliases)

# Whether gradients are exchanged while the backward pass still runs: the engines do (DDP's
# buckets, FSDP2's prefetch), so a run cannot be told otherwise; predict turns it off where
# every core computes (gloo and MPI then take their time from compute) or when told.
OVERLAP = Option("overlap", bool, True, "communication overlaps the backward pass (the "
                 "engine's behaviour; 0 models it serialised)",
                 assumption="the engine always overlaps its gradient exchange with the "
                 "backward pass")


def options_markdown(strategies: Iterable[tuple[str, Sequence[Option]]]) -> str:
    """The table of every strategy's options as docs/spec/strategies.md prints it (one row per
    option, or one saying it takes none); tests keep the page equal to it."""
    def cell(value: Any) -> str:
        if value is None:
            return "—"
        if isinstance(value, bool):
            return f"`{str(value).lower()}`"
        return f"`{value:g}`" if isinstance(value, float) else f"`{value}`"

    rows = ["| strategy | option | type | default | aliases | bounds, choices | meaning |",
            "|---|---|---|---|---|---|---|"]
    for name, options in strategies:
        if not options:
            rows.append(f"| `{name}` | — | | | | | takes no option |")
        for option in options:
            bounds = (", ".join(f"`{choice}`" for choice in option.choices) if option.choices
                      else f"≥ {option.minimum:g}" if option.minimum is not None else "")
            meaning = option.help if not option.assumption else \
                f"{option.help}; predict only, a run refuses it: {option.assumption}"
            rows.append(f"| `{name}` | `{option.name}` | {option.kind.__name__} | "
                        f"{cell(option.default)} | "
                        f"{', '.join(f'`{alias}`' for alias in option.aliases)} | {bounds} | "
                        f"{meaning} |")
    return "\n".join(rows) + "\n"
