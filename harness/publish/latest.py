"""A machine page's latest results: the newest record of each experiment with its headline
figures (harness/facts/metrics.HEADLINE) in the report's units, its commit and status."""
from __future__ import annotations

from harness.facts.metrics import HEADLINE, heading_of
from harness.publish.records import Entry, short_commit
from harness.records.experiment import experiment_key, fields_of, text
from harness.report.columns import heading as column_heading
from harness.report.columns import identity_columns
from harness.report.document import Table
from harness.report.machines import SHOWN, experiment
from harness.report.units import report_scales, with_ci


def latest_table(entries: list[Entry]) -> tuple[Table, list[Entry]]:
    """One row per experiment (the identity every view shares): its newest record's status
    and headline metrics; a column for each identity field that differs within a workload,
    the others named under the table."""
    newest: dict[str, Entry] = {}
    for entry in entries:
        if not entry.training:
            continue
        key = experiment_key(entry.view.as_record())
        known = newest.get(key)
        if known is None or (known.view.created_at, known.view.run_id) < (
                entry.view.created_at, entry.view.run_id):
            newest[key] = entry
    extra, every_row = identity_columns([entry.view.spec for entry in newest.values()], SHOWN)

    def cells(entry: Entry) -> list[str]:
        fields = fields_of(entry.view.spec)
        return [*experiment(entry.view), *(text(name, fields.get(name)) for name in extra)]

    chosen = sorted(newest.values(), key=lambda entry: (cells(entry), entry.view.run_id))
    scales = report_scales(entry.view for entry in chosen)
    columns = [*(column_heading(name) for name in (*SHOWN, *extra)), "commit",
               *(f"{heading_of(name)} ({scales[name].label})" if scales[name].label
                 else heading_of(name) for name in HEADLINE)]
    rows = []
    for entry in chosen:
        view = entry.view
        rows.append([*cells(entry), short_commit(view) or "-",
                     *(with_ci(view.metrics.get(name), scales[name], scales[name].unit)
                       for name in HEADLINE),
                     view.status_text, view.created_at, view.run_id])
    return Table(title="Latest results", columns=[*columns, "status", "created (UTC)", "run"],
                 rows=rows, numeric=[False] * 3 + [True, False] + [False] * len(extra)
                 + [False] + [True] * len(HEADLINE) + [False] * 3,
                 footnotes=[every_row] if every_row else []), chosen
