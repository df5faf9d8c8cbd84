"""What a report holds before any format writes it: sections of titled tables."""
from __future__ import annotations

from dataclasses import dataclass, field

# What precedes a table's notes, in every format.
NOTES_HEADING = ("Runs not measured, failed, measured on a busy machine or less precise than "
                 "asked, and repeats that disagree:")


@dataclass
class Table:
    """A titled table; `numeric[i]` right-aligns column i; `notes` follow it as a list."""

    title: str
    columns: list[str]
    rows: list[list[str]]
    numeric: list[bool]
    intro: str = ""
    notes: list[str] = field(default_factory=list)


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
