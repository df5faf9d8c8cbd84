"""The report as GitHub-flavoured Markdown: tables per workload and per collective."""
from __future__ import annotations

from harness.core.outputs import markdown_text
from harness.report.model import NOTES_HEADING, table_heading
from harness.report.tables import Report, Table


def md_escape(text: str) -> str:
    """Text that renders literally in a table cell (harness/core/outputs.markdown_text): no
    HTML, emphasis, link, image or autolink, no cell break. The report's own texts are cut
    where they are made, so nothing is cut here."""
    return markdown_text(text, None)


def render_table(table: Table) -> list[str]:
    """The table's lines, columns padded so the source reads as a table too."""
    header = [md_escape(c) for c in table.columns]
    rows = [[md_escape(cell) for cell in row] for row in table.rows]
    widths = [max(3, *(len(row[i]) for row in [header, *rows])) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        padded = [cell.rjust(w) if right else cell.ljust(w)
                  for cell, w, right in zip(cells, widths, table.numeric, strict=True)]
        return "| " + " | ".join(padded) + " |"

    rule = ["-" * (w - 1) + ":" if right else "-" * w
            for w, right in zip(widths, table.numeric, strict=True)]
    return [line(header), line(rule), *(line(row) for row in rows)]


def render(report: Report) -> str:
    """The whole report as Markdown text, ending with one newline."""
    lines = ["# dtbench report", "", md_escape(report.summary), "",
             f"Regenerate with: {md_escape(report.regenerate)}", ""]
    for section in report.sections:
        lines += [f"## {md_escape(section.title)}", ""]
        if section.intro:
            lines += [md_escape(section.intro), ""]
        for table in section.tables:
            heading = table_heading(section, table)
            if heading:
                lines += [f"### {md_escape(heading)}", ""]
            if table.intro:
                lines += [md_escape(table.intro), ""]
            lines += [*render_table(table), ""]
            lines += [line for note in table.footnotes for line in (md_escape(note), "")]
            if table.notes:
                lines += [NOTES_HEADING, ""]
                lines += [f"- {md_escape(note)}" for note in table.notes] + [""]
    if report.skipped:
        lines += ["## Skipped inputs", ""]
        lines += [f"- {md_escape(warning)}" for warning in report.skipped] + [""]
    if not report.empty:
        lines += ["## Records", "", *render_table(report.records), ""]
    if report.files:
        lines += ["Files read:", ""] + [f"- {md_escape(name)}" for name in report.files] + [""]
    return "\n".join(lines).rstrip("\n") + "\n"
