"""The report as GitHub-flavoured Markdown: its tables padded so that the source reads as
tables too, its prose in lines of at most WIDTH characters."""
from __future__ import annotations

import re
import textwrap

from harness.core.outputs import markdown_text
from harness.report.document import NOTES_HEADING, Report, Table, table_heading

# The longest line of prose (tables are as wide as their cells).
WIDTH = 100


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


def paragraph(text: str, prefix: str = "") -> list[str]:
    """Escaped prose in lines of at most WIDTH characters (Markdown joins them again); a
    list item's lines after the first are indented under it."""
    lines = textwrap.wrap(md_escape(text), WIDTH, initial_indent=prefix,
                          subsequent_indent=" " * len(prefix), break_long_words=False,
                          break_on_hyphens=False) or [prefix.rstrip()]
    return [lines[0], *(_literal_start(line, len(prefix)) for line in lines[1:])]


def _literal_start(line: str, indent: int) -> str:
    """A continued line that would open a block (a heading, a list item, a setext rule) with
    its first mark escaped: it goes on the paragraph."""
    head, rest = line[:indent], line[indent:]
    number = re.match(r"\d+(?=[.)])", rest)
    if number:
        return head + number.group() + "\\" + rest[number.end():]
    return head + ("\\" + rest if rest[:1] in "#-+=" else rest)


def render(report: Report) -> str:
    """The whole report as Markdown text, ending with one newline: the summary, the sections,
    the run ids (with --runs), how to regenerate it and the files read."""
    lines = ["# dtbench report", "", *paragraph(report.summary), ""]
    for section in report.sections:
        lines += [f"## {md_escape(section.title)}", ""]
        if section.intro:
            lines += [*paragraph(section.intro), ""]
        for table in section.tables:
            heading = table_heading(section, table)
            if heading:
                lines += [f"### {md_escape(heading)}", ""]
            if table.intro:
                lines += [*paragraph(table.intro), ""]
            lines += [*render_table(table), ""]
            lines += [line for note in table.footnotes for line in (*paragraph(note), "")]
            if table.notes:
                lines += [*paragraph(NOTES_HEADING), ""]
                lines += [line for note in table.notes for line in paragraph(note, "- ")] + [""]
    if report.skipped:
        lines += ["## Skipped inputs", ""]
        lines += [line for warning in report.skipped for line in paragraph(warning, "- ")]
        lines += [""]
    if report.runs and not report.empty:
        lines += ["## Records", "", *render_table(report.records), ""]
    elif not report.empty:
        lines += [*paragraph(f"The run ids of these {len(report.records.rows)} records: "
                             "dtbench report --runs."), ""]
    lines += [f"Regenerate with: {md_escape(report.regenerate)}", ""]
    if report.files:
        lines += ["Files read:", ""] + [f"- {md_escape(name)}" for name in report.files] + [""]
    return "\n".join(lines).rstrip("\n") + "\n"
