"""docs/guide/glossary.md defines each word a reader of dtbench's outputs meets, as dtbench uses
it, and links to where it is specified: every link resolves, to the file and the heading it
names; the documentation's index and the reports guide link the glossary."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GLOSSARY = ROOT / "docs" / "guide" / "glossary.md"
# The words issue 51 names, and the mark the report added beside them.
TERMS = ("store", "experiment", "identity", "suite", "strategy", "reference machine", "MFU",
         "busbw", "in-process interval", "between-run spread", "(busy)", "(imprecise)",
         "(emulated)", "diagnostic")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to -."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_every_word_is_defined_once_with_a_link_to_where_it_is_specified() -> None:
    text = GLOSSARY.read_text()
    paragraphs = [p.replace("\n", " ") for p in text.split("\n\n") if p.startswith("**")]
    defined = [p[2:p.index("**", 2)] for p in paragraphs]
    assert defined == list(TERMS)
    for paragraph in paragraphs:
        assert " — " in paragraph and ("](" in paragraph or "`harness/" in paragraph), \
            paragraph[:60]


def test_every_link_of_the_glossary_resolves_to_its_file_and_heading() -> None:
    broken = []
    for target in LINK.findall(GLOSSARY.read_text()):
        path, _, anchor = target.partition("#")
        page = (GLOSSARY.parent / path).resolve()
        if not page.is_file():
            broken.append(target)
        elif anchor and anchor not in {slug(line.lstrip("#")) for line in
                                       page.read_text().splitlines() if line.startswith("#")}:
            broken.append(target)
    assert broken == []


def test_the_index_and_the_reports_guide_link_the_glossary() -> None:
    assert "(guide/glossary.md)" in (ROOT / "docs" / "index.md").read_text()
    assert "(glossary.md)" in (ROOT / "docs" / "guide" / "reports.md").read_text()
