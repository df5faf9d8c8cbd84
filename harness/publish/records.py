"""The published site's records: every record as it was stored, gathered in a page per
machine and commit of the code under test (or day, without a commit), as asv keeps a
machine's results a file per commit: `records/MACHINE/COMMIT.html`, each record's JSON text
unchanged in a <pre> under its own anchor, which the tables' run ids link to.

A file per record made a 100,000-record site 100,000 files: creating them cost 6-27 s of
kernel time on the development VM (0.1-0.3 ms an inode, against 0.008 ms a hard link), and
such a site is slow to copy or deploy; a page per commit makes it about a thousand (3 s of
kernel time). A JSON array per commit beside each page was tried and dropped: it doubled the
bytes written (2.8 GB for 100,000 records; publish took 37.2 and 24.8 s with it, 20.7-22.1 s
without). The store itself (`dtbench store export`) gives the records as JSON files.
"""
from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from harness.publish.page import e, render_page
from harness.report.view import RecordView, clean_text
from harness.store.directory import record_text

SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,79}")
CHUNK = 5000  # records a worker writes at a time (whole bundles; a server's in one query)


class Names:
    """File names (and anchors) for texts: the text itself where it is short and safe, else a
    slug and a hash of the text; unique ignoring case (case-insensitive file systems)."""

    def __init__(self) -> None:
        self.given: dict[str, str] = {}
        self.taken: set[str] = {"index"}

    def __call__(self, text: str) -> str:
        if text in self.given:
            return self.given[text]
        name = text if SAFE.fullmatch(text) and not text.endswith(".") else ""
        if not name or name.lower() in self.taken:
            slug = "-".join(re.findall(r"[a-z0-9]+", text.lower()))[:40] or "x"
            name = f"{slug}-{hashlib.sha256(text.encode('utf-8', 'replace')).hexdigest()[:10]}"
        self.given[text] = name
        self.taken.add(name.lower())
        return name


@dataclass
class Entry:
    """A record (slim, from the index, unless loaded in full) with its view, the catalog row
    it came from, its anchor in its bundle and the link to it from the site's top."""

    record: dict[str, Any]
    view: RecordView
    file: str
    row: dict[str, Any]
    machine: str = ""
    link: str = ""

    def __post_init__(self) -> None:
        self.machine = self.view.machine_label

    @property
    def training(self) -> bool:
        view = self.view
        return not (view.is_comm or view.is_kernel or view.is_prediction)


@dataclass
class Bundle:
    """One machine's records of one commit (or day): a page."""

    name: str  # records/<machine file>/<commit or day>, without .html
    machine: str
    version: str
    entries: list[Entry] = field(default_factory=list)


def short_commit(view: RecordView) -> str:
    """The commit of the code under test, 12 digits ("" where the record names none)."""
    return clean_text(view.code.get("commit"), 60)[:12]


def version_of(view: RecordView) -> str:
    """The commit (12 digits) of the code under test, else the record's day."""
    return short_commit(view) or view.created_at[:10] or "undated"


def bundle_entries(entries: Iterable[Entry], machine_file: dict[str, str]) -> list[Bundle]:
    """The entries grouped by machine and version, each entry's link set; bundles in machine,
    then version order, records in each by time and run id."""
    found: dict[tuple[str, str], Bundle] = {}
    names: dict[str, Names] = {}
    for entry in entries:
        version = version_of(entry.view)
        bundle = found.get((entry.machine, version))
        if bundle is None:
            folder = machine_file[entry.machine]
            name = names.setdefault(entry.machine, Names())(version)
            bundle = found[entry.machine, version] = Bundle(f"records/{folder}/{name}",
                                                            entry.machine, version)
        bundle.entries.append(entry)
        entry.link = f"{bundle.name}.html#{entry.file}"
    bundles = [found[key] for key in sorted(found)]
    for bundle in bundles:
        bundle.entries.sort(key=lambda entry: (entry.view.created_at, entry.view.run_id))
    return bundles


def chunks(bundles: list[Bundle]) -> list[list[Bundle]]:
    """Consecutive whole bundles of about CHUNK records each."""
    found: list[list[Bundle]] = []
    size = CHUNK
    for bundle in bundles:
        if size >= CHUNK:
            found.append([])
            size = 0
        found[-1].append(bundle)
        size += len(bundle.entries)
    return found


def stored_texts(entries: list[Entry]) -> list[str | None]:
    """Each entry's record as stored: a directory store's file, a server's document (one
    query a server), a file input's record written out; None where it is gone."""
    texts: list[str | None] = [None] * len(entries)
    servers: dict[int, tuple[Any, dict[str, list[int]]]] = {}
    for i, entry in enumerate(entries):
        store = entry.row.get("_store")
        if store is None:
            texts[i] = record_text(entry.record)  # a file input's, validated when read
        elif isinstance(getattr(store, "root", None), Path):
            # None where it is gone since the index was read (the bundle says so), or is no
            # longer a regular file under the store
            texts[i] = store.record_text(entry.row["path"])
        else:
            wanted = servers.setdefault(id(store), (store, {}))[1]
            wanted.setdefault(entry.view.run_id, []).append(i)
    for store, wanted in servers.values():
        for run_id, text in store.record_texts(list(wanted)):
            for i in wanted.get(run_id, []):
                texts[i] = text if text.endswith("\n") else text + "\n"
    return texts


def bundle_page(bundle: Bundle, texts: list[str | None]) -> str:
    """The bundle's page: each record's stored text under its anchor."""
    body = [f"<p>{len(bundle.entries)} record(s), each as it was stored.</p>"]
    for entry, text in zip(bundle.entries, texts, strict=True):
        body.append(f'<h2 id="{e(entry.file)}">{e(clean_text(entry.view.run_id, 200))}</h2>')
        # element content: only & < > need escaping, and JSON is full of quotes
        body.append(f"<pre>{escape(text, quote=False)}</pre>" if text is not None else
                    '<p class="note">Not found in its store when the site was published.</p>')
    title = f"Records: {clean_text(bundle.machine, 120)} at {bundle.version}"
    return render_page(title, body, root="../../")


def write_chunk(chunk: list[Bundle], write: Callable[[str, str], None]) -> None:
    """Write a chunk's bundles through `write(relative path, text)`."""
    entries = [entry for bundle in chunk for entry in bundle.entries]
    texts = iter(stored_texts(entries))
    for bundle in chunk:
        write(f"{bundle.name}.html", bundle_page(bundle, [next(texts) for _ in bundle.entries]))
