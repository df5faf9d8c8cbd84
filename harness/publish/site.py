"""The pages of the published site from a catalog of records: an index of machines and
workloads, a page per machine (latest results, trends over commits, its records), a page per
workload (machines side by side), and every record as stored under records/ (a file per
machine and commit: harness/publish/records.py).

Only the latest records of each machine's experiments are loaded in full (the tables); the
trends, counts and record lists come from the stores' index rows, and the raw records are
copied as stored, so a store of 100,000 records is published without parsing them all.

Tables are the report's (harness/report) written by its HTML table writer, with links and
sorting added; every text from a record is escaped there. File names come from the records
only through `Names`, which keeps them to safe characters and unique.
"""
from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from harness.core.errors import UsageError
from harness.core.files import RefusedFile, folder_under
from harness.publish.fleet_page import PAGE, fleet_page, has_doctor_records
from harness.publish.latest import latest_table
from harness.publish.page import e, render_page
from harness.publish.records import (
    Bundle,
    Entry,
    Names,
    bundle_entries,
    chunks,
    write_chunk,
)
from harness.publish.trends import steps_table, trends
from harness.records.summary import latest_rows
from harness.report.document import Table, table_heading
from harness.report.html import render_table
from harness.report.machineplot import machines_chart
from harness.report.machines import SYSTEM_COLUMNS, by_machine, default_reference, systems_table
from harness.report.tables import records_table
from harness.report.view import RecordView, sort_key
from harness.store.sources import Catalog


@dataclass
class Site:
    """What publish wrote: file paths relative to the site's top."""

    files: list[str]
    machines: list[str]
    workloads: list[str]


SAFE_FILE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # what Names and the pages' names give
_FORKED: Builder | None = None  # the builder a forked page worker inherits


def _page_in_worker(page: tuple[str, str]) -> list[str]:
    assert _FORKED is not None
    return _FORKED.page(page)


def _pages_in_parallel(builder: Builder, pages: list[tuple[str, str]]
                       ) -> Iterator[list[str]] | None:
    """The files of each page in turn, written by forked workers, one a core: a machine's
    trend plots take a second or more each (matplotlib), the pages are independent, and a
    fork inherits the loaded records. None where the platform cannot fork or one core is
    all there is (the caller writes the pages itself)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        os.cpu_count() or 1
    if cores < 2 or len(pages) < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return None

    def results() -> Iterator[list[str]]:
        global _FORKED
        _FORKED = builder
        try:
            with ProcessPoolExecutor(min(cores, len(pages)),
                                     mp_context=multiprocessing.get_context("fork")) as pool:
                yield from pool.map(_page_in_worker, pages)
        finally:
            _FORKED = None

    return results()


def _dates(entries: list[Entry]) -> tuple[str, str]:
    days = sorted(entry.view.created_at[:10] for entry in entries if entry.view.created_at)
    return (days[0], days[-1]) if days else ("-", "-")


def _section(title: str, table: Table, table_id: str, *, intro: str = "",
             links: dict[tuple[int, int], str] | None = None) -> list[str]:
    lines = [f"<h2>{e(title)}</h2>"]
    if intro:
        lines.append(f"<p>{e(intro)}</p>")
    if not table.rows:
        return [*lines, '<p class="note">None.</p>']
    lines += render_table(table, links=links, table_id=table_id)
    lines += [f'<p class="note">{e(line)}</p>' for line in table.footnotes]
    if table.notes:
        lines += ["<ul>", *(f"<li>{e(note)}</li>" for note in table.notes), "</ul>"]
    return lines


def _records(entries: list[Entry], root: str, table_id: str) -> list[str]:
    """The report's records table, each run id a link to its JSON."""
    ordered = sorted(entries, key=lambda entry: (entry.view.created_at, entry.view.run_id))
    table = records_table([entry.view for entry in ordered])
    links = {(r, 0): f"{root}{entry.link}" for r, entry in enumerate(ordered)}
    return _section("Records", table, table_id, links=links,
                    intro="Every record, linked to its JSON as it was stored.")


class Builder:
    """Writes the site's pages and records into `out` (an empty directory)."""

    def __init__(self, catalog: Catalog, out: Path, *, regenerate: str,
                 progress: Callable[[str], None], reference: str | None = None) -> None:
        self.out = out
        self.regenerate = regenerate
        self.progress = progress
        self.catalog = catalog
        progress(f"loading the latest of {len(catalog.rows)} record(s)")
        full = {record["run_id"]: record for record in catalog.load(latest_rows(catalog.rows))}
        names = Names()
        made = []
        for row, slim in zip(catalog.rows, catalog.summaries(), strict=True):
            record = full.get(row["run_id"])
            # a slim record's view is for lists and grouping: its metrics are the trends'
            # (read from the record), and views of 100,000 metric lists took seconds
            view = RecordView.of(record or {**slim, "metrics": []})
            made.append((view, record or slim, row))
        made.sort(key=lambda item: sort_key(item[0]))
        self.entries = [Entry(record, view, names(view.run_id or "record"), row)
                        for view, record, row in made]
        # the entries loaded in full: tables with intervals, systems, machines side by side
        self.full = [entry for entry in self.entries if entry.view.run_id in full]
        self.by_machine: dict[str, list[Entry]] = {}
        self.full_by_machine: dict[str, list[Entry]] = {}
        for entry in self.entries:
            self.by_machine.setdefault(entry.machine, []).append(entry)
            if entry.view.run_id in full:
                self.full_by_machine.setdefault(entry.machine, []).append(entry)
        self.machines = sorted(self.by_machine)
        self.workloads = sorted({entry.view.workload for entry in self.entries
                                 if entry.training})
        pages = Names()
        self.machine_file = {label: pages(label) for label in self.machines}
        pages = Names()
        self.workload_file = {name: pages(name) for name in self.workloads}
        self.files: list[str] = []
        self.chunks: list[list[Bundle]] = []
        views = [entry.view for entry in self.full]
        if reference is not None and reference not in self.machines:
            raise UsageError(f"--reference {reference!r}: no such machine; the records name "
                             f"{', '.join(self.machines)}")
        runs = [view for view in views if view.status == "success" and not (
            view.is_comm or view.is_kernel or view.is_prediction)]
        self.reference = reference or (default_reference(runs) if runs else "")

    def write(self, relative: str, data: str | bytes) -> None:
        """Write a file of the site: its folder is checked to lie under the site (no `..`, no
        link; names come from records only through `Names`, this holds whatever made them)."""
        parent, _, name = relative.rpartition("/")
        if not SAFE_FILE.fullmatch(name):
            raise RefusedFile(f"{relative}: not a file name the site writes")
        path = (folder_under(self.out, parent) if parent else self.out) / name
        if isinstance(data, bytes):
            path.write_bytes(data)
        else:
            path.write_text(data, encoding="utf-8")
        self.files.append(relative)

    def build(self) -> Site:
        self.chunks = chunks(bundle_entries(self.entries, self.machine_file))
        self.progress(f"{len(self.entries)} record(s) in "
                      f"{sum(len(chunk) for chunk in self.chunks)} file(s) of records")
        pages = [("index", "")] + [("records", str(i)) for i in range(len(self.chunks))] + \
            [("machine", label) for label in self.machines] + \
            [("workload", name) for name in self.workloads] + \
            [("fleet", "")] * has_doctor_records(entry.record for entry in self.full)
        written = _pages_in_parallel(self, pages)
        machines = records = 0
        for page in pages:
            if page[0] == "machine":
                machines += 1
                self.progress(f"machine {machines}/{len(self.machines)}: {page[1]}")
            self.files += next(written) if written is not None else self.page(page)
            if page[0] == "records":
                records += sum(len(bundle.entries) for bundle in self.chunks[int(page[1])])
                self.progress(f"records {records}/{len(self.entries)} written")
        return Site(self.files, self.machines, self.workloads)

    def page(self, page: tuple[str, str]) -> list[str]:
        """Write a task's files (index, records, a page and its plots); the files written."""
        before = len(self.files)
        kind, name = page
        if kind == "index":
            self.write("index.html", self.index())
        elif kind == "records":
            write_chunk(self.chunks[int(name)], self.write)
        elif kind == "machine":
            self.write(f"machines/{self.machine_file[name]}.html", self.machine_page(name))
        elif kind == "fleet":
            self.write(PAGE, fleet_page(entry.record for entry in self.full))
        else:
            self.write(f"workloads/{self.workload_file[name]}.html", self.workload_page(name))
        written, self.files[before:] = self.files[before:], []
        return written

    def _machine_links(self, labels: list[str], root: str, column: int = 0
                       ) -> dict[tuple[int, int], str]:
        return {(r, column): f"{root}machines/{self.machine_file[label]}.html"
                for r, label in enumerate(labels) if label in self.machine_file}

    def reference_for(self, views: list[RecordView]) -> str | None:
        """The site's reference machine (--reference, else the identified machine with the
        most records) where these records include it, else theirs; None without a
        successful training record."""
        runs = [view for view in views if view.status == "success" and not (
            view.is_comm or view.is_kernel or view.is_prediction)]
        if not runs:
            return None
        if any(view.machine_label == self.reference for view in runs):
            return self.reference
        return default_reference(runs)

    def chart(self, views: list[RecordView], relative: str, root: str,
              reference: str | None = None) -> list[str]:
        """The comparison a visitor comes for, first on the page: every machine's throughput
        per workload and experiment, its interval and its ratio to the reference."""
        reference = reference or self.reference_for(views)
        if reference is None:
            return ['<p class="note">No successful training record: nothing to compare.</p>']
        plot = machines_chart(views, reference)
        lines = [f"<h2>{e(plot.title)}</h2>"]
        if plot.png is None:
            return [*lines, f'<p class="note">{e(plot.caption)}</p>']
        self.write(relative, plot.png)
        return [*lines, "<figure>", f'<img alt="{e(plot.alt)}" src="{e(root + relative)}">',
                f"<figcaption>{e(plot.caption)}</figcaption>", "</figure>"]

    def index(self) -> str:
        systems = systems_table([entry.view for entry in self.full])
        labels = sorted(self.full_by_machine)
        for row, label in zip(systems.rows, labels, strict=True):
            mine = self.by_machine[label]
            row += [str(len(mine)), *_dates(mine)]
        systems.columns += ["records", "first", "last"]
        systems.numeric += [True, False, False]
        workloads = Table("Workloads", ["workload", "machines", "records", "last"], [],
                          [False, True, True, False])
        for name in self.workloads:
            mine = [entry for entry in self.entries
                    if entry.training and entry.view.workload == name]
            workloads.rows.append([name, str(len({x.machine for x in mine})),
                                   str(len(mine)), _dates(mine)[1]])
        first, last = _dates(self.entries)
        body = [f"<p>{len(self.entries)} record(s) from {len(self.machines)} machine(s), "
                f"{e(first)} to {e(last)}. Regenerate with: <code>{e(self.regenerate)}</code>"
                "</p>",
                *self.chart([entry.view for entry in self.full], "plots/machines.png", ""),
                *_section("Machines", systems, "machines", links=self._machine_links(labels, ""),
                          intro="Each machine as an MLPerf system description names it, "
                          "with how many records it made and when."),
                *_section("Workloads", workloads, "workloads",
                          links={(r, 0): f"workloads/{self.workload_file[name]}.html"
                                 for r, name in enumerate(self.workloads)},
                          intro="Each workload's page compares the machines that ran it."),
                *([f'<p><a href="{PAGE}">The fleet</a>: the nodes\' doctor records.</p>']
                  if has_doctor_records(x.record for x in self.full) else [])]
        return render_page("dtbench results", body, root="")

    def machine_page(self, label: str) -> str:
        mine = self.by_machine[label]
        latest, chosen = latest_table(self.full_by_machine.get(label, []))
        links = {(r, 0): f"../workloads/{self.workload_file[entry.view.workload]}.html"
                 for r, entry in enumerate(chosen)}
        links.update({(r, len(latest.columns) - 1): f"../{entry.link}"
                      for r, entry in enumerate(chosen)})
        body = [*_section("System", systems_table([entry.view for entry in
                                                   self.full_by_machine.get(label, [])]),
                          "system"),
                *_section("Latest results", latest, "latest", links=links,
                          intro="The newest record of each experiment. Values are medians; "
                          "brackets hold the 95% confidence interval of the median where "
                          "per-step samples exist. (busy): measured while other processes "
                          "took CPU time from the run's cores. (imprecise): the interval "
                          "missed the run's precision target."),
                "<h2>Trends</h2>"]
        found_all = []
        for name in self.workloads:
            records = [entry.record for entry in mine
                       if entry.training and entry.view.workload == name]
            found = trends(records) if records else []
            for trend in found:
                found_all.append(trend)
                body.append(f"<h3>{e(name)}: {e(trend.heading)}</h3>")
                if trend.png is None:
                    body.append('<p class="note">One commit only: no trend yet.</p>')
                    continue
                plot = f"plots/{self.machine_file[label]}--{self.workload_file[name]}--" \
                       f"{trend.metric}.png"
                self.write(plot, trend.png)
                body += ["<figure>", f'<img alt="{e(trend.heading)} of {e(name)} on '
                         f'{e(label)} over commits, a line per experiment, change points '
                         f'dashed" src="../{e(plot)}">',
                         f"<figcaption>{e(name)}: {e(trend.heading)} per commit (median, "
                         "dots: every run); dashed: a change point.</figcaption>", "</figure>"]
        if not found_all:
            body.append('<p class="note">No successful training record: no trends.</p>')
        body += _section("Change points", steps_table(found_all), "steps",
                         intro="Steps found as dtbench history finds them: PELT candidates "
                         "kept where a Mann-Whitney test and the 5% minimum effect agree.")
        body += _records(mine, "../", "records")
        return render_page(f"Machine: {label}", body, root="../")

    def workload_page(self, name: str) -> str:
        mine = [entry for entry in self.entries
                if entry.training and entry.view.workload == name]
        labels = sorted({entry.machine for entry in mine})
        compared = sorted({entry.machine for entry in mine
                           if entry.view.status == "success"})
        body = ["<p>Machines: " + ", ".join(
            f'<a href="../machines/{e(self.machine_file[label])}.html">{e(label)}</a>'
            for label in labels) + "</p>"]
        views = [entry.view for entry in self.full]
        mine = [view for view in views if view.workload == name and not (
            view.is_comm or view.is_kernel or view.is_prediction)]
        reference = self.reference_for(mine)
        try:
            report = by_machine(views, reference, summary="", regenerate="", workload=name)
        except UsageError:
            body.append('<p class="note">No successful record: nothing to compare.</p>')
        else:
            body += self.chart(mine, f"plots/workload--{self.workload_file[name]}.png", "../",
                               reference)
            tables = 0
            for section in report.sections:
                body += [f"<h2>{e(section.title)}</h2>"]
                if section.intro:
                    body.append(f"<p>{e(section.intro)}</p>")
                for table in section.tables:
                    tables += 1
                    is_systems = table.columns[0] == SYSTEM_COLUMNS[0][1]
                    links = self._machine_links(compared, "../") if is_systems else None
                    title = table_heading(section, table)
                    body += [f"<h3>{e(title)}</h3>"] if title else []
                    body += render_table(table, links=links, table_id=f"t{tables}")
                    body += [f'<p class="note">{e(line)}</p>' for line in table.footnotes]
                    if table.notes:
                        body += ["<ul>", *(f"<li>{e(n)}</li>" for n in table.notes), "</ul>"]
        body.append("<p>Every record of each machine is listed, linked to its JSON, on the "
                    "machine's page.</p>")
        return render_page(f"Workload: {name}", body, root="../")
