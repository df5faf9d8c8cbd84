"""Numbers with units chosen for reading: the scale a column of a metric takes (GFLOP/s, MiB,
ms, %) as the metric catalogue (harness/facts/metrics.py) declares it, and numbers of about four
significant digits. The report's tables, publish's pages and the run summary all read them."""
from __future__ import annotations

from dataclasses import dataclass, replace

from harness.facts.metrics import BINARY, LONG_TIME, PERCENT, SI, STEP_TIME, TIME, scale_of

_SI = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
_BINARY = ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"))


@dataclass(frozen=True)
class Scale:
    """Values of one column are divided by `factor` and shown in `label`; `unit` is the
    records' unit the scale was chosen for (a value in another is shown as stored)."""

    label: str
    factor: float = 1.0
    unit: str = ""

    def show(self, value: float | None) -> str:
        return format_number(value / self.factor) if value is not None else "-"


def format_number(value: float | None) -> str:
    """About four significant digits, no exponent for everyday magnitudes."""
    if value is None:
        return "-"
    size = abs(value)
    if size == 0:
        return "0"
    if size >= 1000:
        return f"{value:.0f}"
    if size >= 100:
        return f"{value:.1f}"
    if size >= 10:
        return f"{value:.2f}"
    if size >= 1:
        return f"{value:.3f}"
    return f"{value:.4g}"


def choose_scale(name: str, unit: str, values: list[float]) -> Scale:
    """The unit a column of `values` reads best in: GFLOP/s, MiB, ms, %, ... as the metric
    catalogue (harness/facts/metrics.py) declares its scale, or as its unit suggests."""
    return replace(_choose(scale_of(name, unit), unit, max((abs(v) for v in values),
                                                           default=0.0)), unit=unit)


def _choose(scale: str, unit: str, largest: float) -> Scale:
    if scale == PERCENT:
        return Scale("%", 0.01)
    if scale == SI:
        for factor, prefix in _SI[:4]:
            if largest >= factor:
                return Scale(prefix + unit, factor)
        return Scale(unit)
    if scale == BINARY:
        for factor, label in _BINARY:
            if largest >= factor:
                return Scale(label, factor)
        return Scale("B")
    if scale in (TIME, STEP_TIME, LONG_TIME):
        if scale == STEP_TIME or 0 < largest < 1:
            return Scale("µs", 1e-6) if 0 < largest < 1e-3 else Scale("ms", 1e-3)
        if largest >= 600 and scale == LONG_TIME:
            return Scale("min", 60.0)
        return Scale("s")
    return Scale(unit)


def si(value: float | None, unit: str) -> str:
    """One value with an SI prefix (peak lines, captions): 303.7 GFLOP/s."""
    if value is None:
        return "-"
    for factor, prefix in _SI:
        if abs(value) >= factor:
            return f"{format_number(value / factor)} {prefix}{unit}"
    return f"{format_number(value)} {unit}"

