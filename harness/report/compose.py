"""The report's sections in reading order: the answer first (harness/report/lead.py), then
the details, then the machines and their software; the run ids in an appendix.

Records of two machines or more read machines side by side (`--by machine`): a row per
experiment, a column per machine (harness/report/machines.py); of one machine, a row per
record (`--by record`). The detail sections (strategies, where the time goes, collectives,
kernels, predictions) follow either, each with a machine column where its rows come from
several machines; a column the same in every row is a line under its table.
"""
from __future__ import annotations

from collections import Counter

from harness.core.errors import UsageError
from harness.core.secrets import shown_command
from harness.report.breakdown import breakdown_section
from harness.report.document import Report, Section, folded
from harness.report.kernels import kernel_section
from harness.report.lead import compared_machines, lead_section
from harness.report.machines import by_machine
from harness.report.predictions import prediction_tables
from harness.report.strategies import strategies_section
from harness.report.tables import (
    comm_table,
    machines_table,
    records_table,
    software_table,
    training_table,
)
from harness.report.units import report_scales
from harness.report.view import RecordView, clean_text, group, several_machines

BY = ("machine", "record")


def default_by(views: list[RecordView]) -> str:
    """Machines side by side where two or more have a successful training record."""
    return "machine" if len(compared_machines(views)) > 1 else "record"


def regenerate_command(paths: list[str], fmt: str | None, output: str | None,
                       by: str | None = None, reference: str | None = None,
                       runs: bool = False) -> str:
    """The command line that writes this report again, with the paths as the user gave them."""
    words = ["dtbench", "report", *paths]
    for flag, value in (("--format", fmt), ("-o", output), ("--by", by),
                        ("--reference", reference)):
        if value:
            words += [flag, value]
    return clean_text(shown_command(words + ["--runs"] * runs), None)


def older_note(older: int) -> str:
    """What the summary says of the records left out for being older than their experiment's
    latest commit on the same machine."""
    if not older:
        return ""
    return (f" {older} older record{'s' if older != 1 else ''} of the same machines and "
            "experiments (earlier commits or days) are left out: the report shows each "
            "experiment's latest; dtbench history follows them over time.")


def summary(views: list[RecordView], paths: list[str], older: int = 0) -> str:
    """The report's first line: how many records of how many machines, from where."""
    statuses = Counter(view.status for view in views)
    parts = ", ".join(f"{count} {status}" for status, count in sorted(statuses.items()))
    where = " ".join(clean_text(p, 300) for p in paths)
    if not views:
        return f"No records in {where}."
    count = len({view.machine_label for view in views})
    return (f"{len(views)} record{'s' if len(views) != 1 else ''} ({parts}) of {count} "
            f"machine{'s' if count != 1 else ''} from {where}." + older_note(older))


def build_report(views: list[RecordView], *, paths: list[str], files: list[str],
                 skipped: list[str], regenerate: str, older: int = 0, by: str | None = None,
                 reference: str | None = None, runs: bool = False) -> Report:
    """The report's content from views already in stable order."""
    by = by or default_by(views)
    labels = sorted({view.machine_label for view in views})
    if reference is not None and reference not in labels:
        raise UsageError(f"--reference {reference!r}: no such machine; the records name "
                         f"{', '.join(labels)}")
    training = [v for v in views if not v.is_comm and not v.is_kernel and not v.is_prediction]
    comm = [v for v in views if v.is_comm]
    scales = report_scales(views)
    machines = several_machines(views)
    sections = [found for found in [lead_section(views, reference)] if found is not None]
    systems = None
    if by == "machine":
        systems, side = by_machine(views, reference, summary="", regenerate="").sections
        sections.append(side)
    elif training:
        sections.append(Section(
            "Training", [training_table(name, group_views, scales, machines)
                         for name, group_views in group(training, "workload").items()],
            intro="Values are medians; brackets hold the 95% confidence interval of the median "
                  "where per-step samples exist. MFU = achieved / peak FLOP/s."))
    for detail in (strategies_section(training), breakdown_section(training, machines)):
        if detail is not None:
            sections.append(detail)
    if comm:
        sections.append(Section("Collectives", [
            comm_table(name, group_views, scales["latency"], machines)
            for name, group_views in group(comm, "op").items()]))
    kernels = kernel_section(views, machines)
    if kernels is not None:
        sections.append(kernels)
    predicted = [view for view in views if view.is_prediction]
    if predicted:
        sections.append(Section("Predictions", prediction_tables(predicted)))
    if views:
        sections.append(Section("Machines and software", [
            *(systems.tables if systems else [machines_table(views)]), software_table(views)]))
    for section in sections:
        section.tables = [folded(table) for table in section.tables]
    return Report(summary=summary(views, paths, older), regenerate=regenerate,
                  sections=sections, records=records_table(views, machine=True),
                  files=[clean_text(f, None) for f in files],
                  skipped=[clean_text(s) for s in skipped], empty=not views, runs=runs)
