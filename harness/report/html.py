"""The report as one self-contained HTML page: the Markdown tables plus embedded PNG plots,
and the run ids in a collapsed appendix.

No script, no external resource: a Content-Security-Policy meta tag forbids both, so a
string that slipped through escaping still could not load or run anything.
"""
from __future__ import annotations

import base64
from collections.abc import Mapping
from html import escape

from harness.report.document import NOTES_HEADING, Report, Table, table_heading
from harness.report.view import RecordView

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1360px;
       padding: 0 1em; color: #222; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: left; }
th { background: #f2f2f2; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
figure { margin: 1em 0 2em; }
figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption, .note { color: #555; font-size: 0.9em; }
code { background: #f5f5f5; padding: 0 0.2em; }
summary { cursor: pointer; margin: 1em 0; font-weight: bold; }
"""


def _e(text: str) -> str:
    return escape(text, quote=True)


def render_table(table: Table, *, links: Mapping[tuple[int, int], str] | None = None,
                 table_id: str | None = None) -> list[str]:
    """The table as HTML lines; numeric cells right-aligned. `links[(row, column)]` makes that
    cell a link to the (relative) address; a `table_id` marks the table sortable, for pages
    that carry a script sorting such tables (dtbench publish)."""
    head = "".join(f'<th scope="col">{_e(c)}</th>' for c in table.columns)
    opening = f'<table id="{_e(table_id)}" class="sortable">' if table_id else "<table>"
    lines = [f'<div class="scroll">{opening}', f"<thead><tr>{head}</tr></thead>", "<tbody>"]
    links = links or {}
    for r, row in enumerate(table.rows):
        cells = []
        for c, (text, right) in enumerate(zip(row, table.numeric, strict=True)):
            body = _e(text)
            if (r, c) in links:
                body = f'<a href="{_e(links[(r, c)])}">{body}</a>'
            cells.append(f'<td class="num">{body}</td>' if right else f"<td>{body}</td>")
        lines.append(f"<tr>{''.join(cells)}</tr>")
    return [*lines, "</tbody>", "</table></div>"]


def _items(items: list[str]) -> list[str]:
    return ["<ul>", *(f"<li>{_e(item)}</li>" for item in items), "</ul>"]


def _plots(views: list[RecordView]) -> list[str]:
    from harness.report.plots import Plot, render_plots
    from harness.report.safe import drawn

    lines = ["<h2>Plots</h2>"]
    number = 0
    from harness.report.kernelplots import kernel_roofline_plot

    plots = [*render_plots(views), kernel_roofline_plot(views)]
    if any(view.is_prediction for view in views):
        from harness.report.predictions import efficiency_plot

        plots.append(drawn(efficiency_plot, views, Plot))
    if any("time_breakdown" in view.metrics for view in views):
        from harness.report.breakdown import breakdown_plot

        plots.append(drawn(breakdown_plot, views, Plot))
    if any(view.spec.get("data") for view in views):
        from harness.report.dataplots import loader_plot

        plots.append(drawn(loader_plot, views, Plot))
    for plot in plots:
        if plot.png is None:
            lines.append(f'<p class="note">{_e(plot.caption)}</p>')
            continue
        number += 1
        data = base64.b64encode(plot.png).decode("ascii")
        lines += ["<figure>",
                  f'<img alt="{_e(plot.alt)}" src="data:image/png;base64,{data}">',
                  f"<figcaption>Figure {number}. {_e(plot.caption)}</figcaption>",
                  "</figure>"]
    return lines


def render(report: Report, views: list[RecordView]) -> str:
    """The whole page, ending with one newline."""
    lines = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
             f'<meta http-equiv="Content-Security-Policy" content="{_e(CSP)}">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             "<title>dtbench report</title>", f"<style>{STYLE}</style>", "</head>", "<body>",
             "<h1>dtbench report</h1>", f"<p>{_e(report.summary)}</p>"]
    for section in report.sections:
        lines.append(f"<h2>{_e(section.title)}</h2>")
        if section.intro:
            lines.append(f"<p>{_e(section.intro)}</p>")
        for table in section.tables:
            heading = table_heading(section, table)
            if heading:
                lines.append(f"<h3>{_e(heading)}</h3>")
            if table.intro:
                lines.append(f"<p>{_e(table.intro)}</p>")
            lines += render_table(table)
            lines += [f'<p class="note">{_e(line)}</p>' for line in table.footnotes]
            if table.notes:
                lines += [f"<p>{NOTES_HEADING}</p>",
                          *_items(table.notes)]
    if not report.empty:
        lines += _plots(views)
    if report.skipped:
        lines += ["<h2>Skipped inputs</h2>", *_items(report.skipped)]
    if not report.empty:
        lines += ["<details>", f"<summary>Records: the {len(report.records.rows)} run ids the "
                  "report was made from</summary>", *render_table(report.records), "</details>"]
    lines.append(f"<p>Regenerate with: <code>{_e(report.regenerate)}</code></p>")
    if report.files:
        lines += ["<p>Files read:</p>", *_items(report.files)]
    return "\n".join([*lines, "</body>", "</html>"]) + "\n"
