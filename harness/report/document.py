"""What a report holds before any format writes it: sections of titled tables."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

# What precedes a table's notes, in every format.
NOTES_HEADING = ("Runs not measured, failed, measured on a busy machine or less precise than "
                 "asked, and repeats that disagree:")
# How the line under a table that names the values its rows share begins.
EVERY_ROW = "Every row: "


@dataclass
class Table:
    """A titled table; `numeric[i]` right-aligns column i; `footnotes` follow it as lines
    about what its rows leave out, then `notes` (runs to look at) as a list. `row_runs` holds
    the run id behind each row (never shown: the appendix and the tests read them); `fold`
    lets a column the same in every row become a line under the table (of the first
    `fold_until` columns only, where given)."""

    title: str
    columns: list[str]
    rows: list[list[str]]
    numeric: list[bool]
    intro: str = ""
    notes: list[str] = field(default_factory=list)
    footnotes: list[str] = field(default_factory=list)
    row_runs: list[str] = field(default_factory=list)
    fold: bool = True
    fold_until: int | None = None


def folded(table: Table) -> Table:
    """The table with every column that holds one value in all its rows (two rows or more)
    left out and named in the line under it; one column stays where every column would go."""
    until = len(table.columns) if table.fold_until is None else table.fold_until
    if not table.fold or len(table.rows) < 2:
        return table
    constant = [i for i in range(until) if len({row[i] for row in table.rows}) == 1]
    if len(constant) == len(table.columns):
        constant = constant[1:]
    if not constant:
        return table
    items = ", ".join(f"{table.columns[i]} {table.rows[0][i]}" for i in constant)
    footnotes = list(table.footnotes)
    shared = next((i for i, line in enumerate(footnotes) if line.startswith(EVERY_ROW)), None)
    if shared is None:
        footnotes.insert(0, f"{EVERY_ROW}{items}.")
    else:
        footnotes[shared] = f"{EVERY_ROW}{items}, {footnotes[shared][len(EVERY_ROW):]}"
    kept = [i for i in range(len(table.columns)) if i not in constant]
    return replace(table, columns=[table.columns[i] for i in kept],
                   rows=[[row[i] for i in kept] for row in table.rows],
                   numeric=[table.numeric[i] for i in kept], footnotes=footnotes,
                   fold_until=None if table.fold_until is None else until - len(constant))


def table_heading(section: Section, table: Table) -> str | None:
    """A table's own heading, or None where its section's heading already says it."""
    return table.title if table.title and table.title != section.title else None


@dataclass
class Section:
    """A heading and its tables."""

    title: str
    tables: list[Table]
    intro: str = ""


@dataclass
class Report:
    """Everything a format writes, in reading order. `records` is the appendix of run ids:
    Markdown writes it with `runs`, HTML always, collapsed."""

    summary: str
    regenerate: str
    sections: list[Section]
    records: Table
    files: list[str]
    skipped: list[str]
    empty: bool
    runs: bool = False
