"""What a plot takes from records, made safe to draw: a record is anyone's input, and a plot
that cannot be drawn from it is left out with a note, never a crash of the whole view.

- `mean`: the mean of the numbers a plot can take (NaN, a gap in a line, where none);
- `drawn`: a plot function's Plot, or the note saying why it was left out.

Record text reaches matplotlib through plots._label, which escapes mathtext's `$`.
"""
from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from harness.core.outputs import clean_text
from harness.report.view import number

PlotT = TypeVar("PlotT")


def mean(values: Iterable[Any]) -> float:
    """The mean of the finite numbers among `values`, NaN where there is none."""
    found = [value for value in map(number, values) if value is not None]
    return math.fsum(found) / len(found) if found else math.nan


def drawn(plot: Callable[..., PlotT], views: Any, note: Callable[[str, str, str], PlotT],
          *args: Any, title: str | None = None) -> PlotT:
    """plot(views, *args), or, where drawing it from these records fails, note(title, "",
    caption) (the Plot class: no alt text, no image): the view keeps its other plots and says,
    on stderr and in the page, which one it left out and why."""
    try:
        return plot(views, *args)
    except Exception as exc:  # noqa: BLE001 - one plot of a view, never the whole view
        title = title or plot.__name__.removesuffix("_plot").replace("_", " ")
        caption = (f"The plot '{title}' could not be drawn from these records "
                   f"({type(exc).__name__}: {clean_text(exc, 200)}): it is omitted.")
        print(f"dtbench: warning: {caption}", file=sys.stderr)
        return note(title, "", caption)
