"""The site's fleet page: the nodes whose `dtbench doctor` records the site holds, each figure
across them against the fleet median, and the nodes that stand out (harness/doctor/fleet.py's
median-absolute-deviation rule)."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from harness.doctor.fleet import fleet, outlier_lines
from harness.publish.page import e, render_page
from harness.report.document import Table
from harness.report.html import render_table
from harness.spec.kinds import DOCTOR, record_kind

PAGE = "fleet.html"


def has_doctor_records(records: Iterable[dict[str, Any]]) -> bool:
    return any(record_kind(record) is DOCTOR for record in records)


def fleet_page(records: Iterable[dict[str, Any]]) -> str:
    nodes, figures = fleet(records)
    table = Table("Nodes against the fleet median",
                  ["figure", "unit", "nodes", "median", "lowest", "highest", "stands out"], [],
                  [False, False, True, True, False, False, False])
    for figure in figures:
        low = min(figure.values, key=figure.values.__getitem__)
        high = max(figure.values, key=figure.values.__getitem__)
        table.rows.append([figure.name.removeprefix("doctor_"), figure.unit,
                           str(len(figure.values)), f"{figure.median:.4g}",
                           f"{figure.values[low]:.4g} ({low})",
                           f"{figure.values[high]:.4g} ({high})",
                           ", ".join(sorted(figure.outliers)) or "-"])
    lines = outlier_lines(figures)
    body = [f"<p>{len(nodes)} node(s) with a doctor record: {e(', '.join(nodes))}. A node "
            "stands out in a figure when it is worse than the median by more than 3.5 robust "
            "standard deviations (1.4826 x the median absolute deviation) and by more than "
            "10% (docs/guide/doctor.md).</p>",
            f"<h2>{e(table.title)}</h2>", *render_table(table, table_id="fleet"),
            "<h2>Nodes that stand out</h2>",
            "<ul>" + "".join(f"<li>{e(line)}</li>" for line in lines) + "</ul>" if lines
            else '<p class="note">None: no node stands out.</p>']
    return render_page("dtbench fleet", body, root="")
