"""What of a chart lies outside its figure: every drawn tick label and every legend, measured
with matplotlib's text extents after the figure is drawn, against the figure's own box; and
every tick label cut short with an ellipsis. A label cut at the figure's edge, or cut to fit,
is a label the reader cannot read.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

from matplotlib.figure import Figure

# Pixels a text may pass the edge by (antialiasing rounds extents outwards).
TOLERANCE = 1.0


def _inside(artist: Any, renderer: Any, figure: Figure) -> bool:
    extent = artist.get_window_extent(renderer)
    box = figure.bbox
    return (extent.x0 >= box.x0 - TOLERANCE and extent.y0 >= box.y0 - TOLERANCE
            and extent.x1 <= box.x1 + TOLERANCE and extent.y1 <= box.y1 + TOLERANCE)


def _drawn_labels(axis: Any) -> Iterator[Any]:
    """The tick labels the axis draws: those of ticks within its view, with text."""
    low, high = sorted(axis.get_view_interval())
    slack = 1e-9 * max(abs(low), abs(high), 1e-300)
    for tick in [*axis.get_major_ticks(), *axis.get_minor_ticks()]:
        if low - slack <= tick.get_loc() <= high + slack:
            for label in (tick.label1, tick.label2):
                if label.get_visible() and label.get_text():
                    yield label


def outside(figure: Figure) -> list[str]:
    """Each tick label and legend of the figure that passes its edge, and each tick label cut
    short, named."""
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    found = []
    axes_all = [*figure.axes, *(child for axes in figure.axes for child in axes.child_axes)]
    for axes in axes_all:
        if not axes.get_visible() or not axes.axison:
            continue
        for axis in (axes.xaxis, axes.yaxis):
            found += [f"tick label {label.get_text()!r} of {axes.get_title()!r}"
                      for label in _drawn_labels(axis) if not _inside(label, renderer, figure)
                      or label.get_text().endswith("…")]
        legend = axes.get_legend()
        if legend is not None and not _inside(legend, renderer, figure):
            found.append(f"the legend of {axes.get_title()!r}")
    found += [f"the figure's legend {legend.get_title().get_text()!r}"
              for legend in figure.legends if not _inside(legend, renderer, figure)]
    return found


@contextmanager
def measured_charts() -> Iterator[list[tuple[int, list[str]]]]:
    """While active, every figure saved (to PNG or anything else) is first measured: yields a
    list of (figure number, what lay outside it), one entry per figure saved."""
    original = Figure.savefig
    found: list[tuple[int, list[str]]] = []

    def savefig(figure: Figure, *args: Any, **kwargs: Any) -> Any:
        found.append((len(found) + 1, outside(figure)))
        return original(figure, *args, **kwargs)

    with mock.patch.object(Figure, "savefig", savefig):
        yield found
