"""What a report holds before any format writes it: sections of titled tables."""
from __future__ import annotations

from dataclasses import dataclass, field

# What precedes a table's notes, in every format.
NOTES_HEADING = ("Runs not measured, failed, measured on a busy machine or less precise than "
                 "asked, and repeats that disagree:")


@dataclass
class Table:
    """A titled table; `numeric[i]` right-aligns column i; `footnotes` follow it as lines
    about what its rows leave out, then `notes` (runs to look at) as a list."""

    title: str
    columns: list[str]
    rows: list[list[str]]
    numeric: list[bool]
    intro: str = ""
    notes: list[str] = field(default_factory=list)
    footnotes: list[str] = field(default_factory=list)


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
    """Everything a format writes, in reading order."""

    summary: str
    regenerate: str
    sections: list[Section]
    records: Table
    files: list[str]
    skipped: list[str]
    empty: bool
