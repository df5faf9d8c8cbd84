"""What `compare` prints, the answer first: the verdict line (every regression named, worst
first, with its change and interval), then the gated metrics as an aligned table (baseline,
candidate, ratio, interval, verdict; headings from the metric catalogue), then notes.
Diagnostics, untested metrics and the experiments one side lacks are listed by name only with
--verbose (else counted). No text line is longer than WIDTH characters; the Markdown for a
pull-request comment keeps the same order."""
from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness.compare.matching import SpecGroup
from harness.compare.rows import IMPROVED, Comparison, ComparisonRow
from harness.core.outputs import clean_text, markdown_text
from harness.facts import metrics as catalogue
from harness.records.experiment import label
from harness.spec.kinds import TRAINING, record_kind

WIDTH = 120
HEADER = ("experiment", "metric", "baseline", "candidate", "ratio", "95% interval", "runs",
          "verdict")
# The narrowest a text cell is cut to where a table would pass WIDTH.
_MIN_TEXT = 16


def change_text(ratio: float) -> str:
    """A ratio as a signed change: 0.918 -> "-8.2%"; from twice up as a factor, "3.09x"."""
    if not math.isfinite(ratio):
        return "-"
    if ratio >= 2:
        return f"{ratio:.3g}x"
    return f"{(ratio - 1.0) * 100.0:+.1f}%"


def _severity(row: ComparisonRow) -> float:
    """How far a row moved in its worse direction, on a log scale (a rate and its time agree)."""
    if not (row.ratio > 0 and math.isfinite(row.ratio)):
        return 0.0
    return -math.log(row.ratio) if row.higher_is_better else math.log(row.ratio)


@dataclass
class Labels:
    """Each compared experiment in a few words, keyed by its rows' (workload, spec): the
    workload and what tells its experiments apart ("alexnet bf16"); the words every experiment
    shares and each workload's own (its batch, its steps) are said once, under the table."""

    short: dict[tuple[str, str], str]
    every_row: list[str]
    own: dict[str, list[str]]

    def of(self, row: ComparisonRow) -> str:
        return self.short.get((row.workload, row.spec), f"{row.workload} {row.spec}")


def _words(group: SpecGroup) -> list[str]:
    """An experiment's label as words, the workload first: the label every view shares for
    training records (its size a word of its own), the spec's label for collectives and
    kernels; the machine where a side held several."""
    record = group.records[0]
    if record_kind(record) is not TRAINING:
        return [group.workload, *clean_text(group.label, 300).split(" ")]
    head, *rest = clean_text(label(record["spec"]), 300).split(" ")
    workload, _, size = head.partition("/")
    machine = group.label.partition(" on ")[2]
    return [workload, *([size] if size else []), *rest,
            *([f"on {machine}"] if machine else [])]


def _order(row: ComparisonRow, worst_first: bool) -> tuple[float, bool]:
    """The worst (or best) change first; of a rate and its time, which move as one, the
    rate."""
    return round(_severity(row) * (-1 if worst_first else 1), 9), row.higher_is_better is not True


def experiment_labels(comparison: Comparison) -> Labels:
    """The Labels of a comparison's experiments."""
    words = {(base.workload, base.label): _words(base) for base, _ in comparison.pairs}
    every = [w for w in next(iter(words.values()), [])[1:]
             if all(w in found[1:] for found in words.values())]
    per_workload: dict[str, list[list[str]]] = {}
    for found in words.values():
        per_workload.setdefault(found[0], []).append(found[1:])
    own = {workload: [w for w in lists[0] if w not in every
                      and all(w in other for other in lists[1:])]
           for workload, lists in per_workload.items()}
    short = {key: " ".join([found[0], *(w for w in found[1:] if w not in every
                                        and w not in own[found[0]])])
             for key, found in words.items()}
    return Labels(short, every, {w: found for w, found in own.items() if found})


def changes(comparison: Comparison, rows: Sequence[ComparisonRow], worst_first: bool = True
            ) -> list[str]:
    """'resnet50 throughput -8.2% [-10.3%, -6.1%]' per row, the worst first (or the best);
    the experiment is named by what tells it from its workload's others."""
    labels = experiment_labels(comparison)
    found = []
    for row in sorted(rows, key=lambda row: _order(row, worst_first)):
        who = labels.of(row)
        interval = (f" [{change_text(row.test.ci_low)}, {change_text(row.test.ci_high)}]"
                    if row.test is not None and row.test.level != "exact" else "")
        found.append(f"{who} {catalogue.heading_of(row.metric)} {change_text(row.ratio)}{interval}")
    return found


def named_failures(failed_runs: Sequence[str]) -> str:
    """'2 candidate runs failed (hep_cnn, lstm)', or '' with none."""
    if not failed_runs:
        return ""
    workloads = ", ".join(dict.fromkeys(run.split(" ", 1)[0] for run in failed_runs))
    count = len(failed_runs)
    return f"{count} candidate run{'s' if count != 1 else ''} failed ({workloads})"


def verdict(comparison: Comparison) -> str:
    """What changed, in one line (compare's first): every regression named, worst first,
    with its change and interval; else how many gated metrics did not change, and what
    improved. It agrees with the exit code (1 when it opens "regression" or "gate
    failed")."""
    failed = named_failures(comparison.failed_runs)
    found = comparison.regressions
    if found:
        return "regression: " + "; ".join(changes(comparison, found)) + (
            f"; {failed}" if failed else "")
    if failed:
        return f"gate failed: {failed}"
    gated = comparison.gated
    if not gated:
        return "nothing compared: " + ("no gated metric with samples on both sides"
                                       if comparison.pairs else "no experiment in common")
    better = [row for row in gated if row.verdict == IMPROVED]
    count = f"{len(gated)} gated metric{'s' if len(gated) != 1 else ''}"
    if better:  # the largest three, one an experiment; the table holds the rest
        best = {}
        for row in sorted(better, key=lambda row: _order(row, False)):
            best.setdefault((row.workload, row.spec), row)
        named = changes(comparison, list(best.values())[:3], worst_first=False)
        more = len(better) - len(named)
        return f"no regression in {count}; improved: " + "; ".join(named) + (
            f"; and {more} more" if more else "")
    return f"no significant change in {count}"


def as_json(comparison: Comparison) -> dict[str, Any]:
    """compare's JSON: the comparison with its verdict line as `summary`."""
    return {**comparison.as_dict(), "summary": verdict(comparison)}


def _scale(name: str, unit: str, values: list[float]) -> tuple[str, float]:
    """The unit a metric's row reads best in, and the factor its values are divided by."""
    scale = catalogue.scale_of(name, unit)
    largest = max((abs(v) for v in values if math.isfinite(v)), default=0.0)
    if scale == catalogue.BINARY:
        return next(((text, factor) for factor, text in ((2**30, "GiB"), (2**20, "MiB"))
                     if largest >= factor), ("KiB", 2**10))
    if scale == catalogue.STEP_TIME or (scale == catalogue.TIME and largest < 1):
        return "ms", 1e-3
    if scale == catalogue.PERCENT:
        return "%", 0.01
    if scale == catalogue.SI:
        return next(((prefix + unit, factor) for factor, prefix in ((1e12, "T"), (1e9, "G"),
                                                                    (1e6, "M"))
                     if largest >= factor), (unit, 1.0))
    return unit or "-", 1.0


def _figure(value: float | None, factor: float) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value / factor:.4g}"


def _ratio(value: float) -> str:
    """Three decimals where a ratio is near 1 (where the gate decides), four digits above 10."""
    if not math.isfinite(value):
        return "-"
    return f"{value:.3f}" if abs(value) < 10 else f"{value:.4g}"


def _runs(row: ComparisonRow) -> str:
    if row.test is None:
        return "-"
    unit = {"samples": " steps", "summary": " rounds"}.get(row.test.level, "")
    return f"{row.test.n_baseline}/{row.test.n_candidate}{unit}"


def _cells(row: ComparisonRow, experiment: str, gated: bool) -> list[str]:
    shown = [v for v in (row.baseline, row.candidate) if v is not None]
    unit, factor = _scale(row.metric, row.unit, shown)
    interval = (f"[{_ratio(row.test.ci_low)}, {_ratio(row.test.ci_high)}]"
                if row.test is not None and row.test.level != "exact" else "-")
    metric = f"{catalogue.heading_of(row.metric)} ({clean_text(unit, 30)})"
    return [clean_text(experiment, 200), metric, _figure(row.baseline, factor),
            _figure(row.candidate, factor), _ratio(row.ratio), interval,
            _runs(row), row.verdict_text if gated else row.verdict]


def table(comparison: Comparison, rows: Sequence[ComparisonRow], *, fit: bool = True
          ) -> tuple[list[str], list[list[str]]]:
    """Heading and cells of the table of `rows`; a column that reads the same in every row
    (the experiment, the runs compared) is left out (a line under the table says it)."""
    labels = experiment_labels(comparison)
    gated = all(row.gated for row in rows)  # a table of diagnostics says so in its title
    cells = [_cells(row, labels.of(row), gated) for row in rows]
    header = list(HEADER)
    for column in range(len(header) - 1, -1, -1):
        if len(cells) > 1 and header[column] in ("experiment", "runs") \
                and len({line[column] for line in cells}) == 1:
            del header[column]
            for line in cells:
                del line[column]
    if fit:
        _fit(header, cells)
    return header, cells


def under_table(comparison: Comparison, rows: Sequence[ComparisonRow], verbose: bool
                ) -> list[str]:
    """The lines under a table: what every row shares, the runs where every row compared
    as many, and (--verbose) each workload's own settings."""
    labels = experiment_labels(comparison)
    named = {labels.of(row) for row in rows}
    shared = [*(named if len(rows) > 1 and len(named) == 1 else ()), *labels.every_row]
    found = [f"Every row: {' '.join(shared)}."] if shared else []
    runs = {_runs(row) for row in rows}
    if len(rows) > 1 and len(runs) == 1:
        found.append(f"Runs compared (baseline/candidate): {runs.pop()} in every row.")
    if verbose and labels.own:
        found.append("Each workload's own: " + "; ".join(
            f"{workload} {' '.join(words)}" for workload, words in labels.own.items()) + ".")
    return found


def _fit(header: list[str], cells: list[list[str]]) -> None:
    """Cut the widest of the text columns (experiment, metric), with an ellipsis, until a
    row fits WIDTH characters."""
    while True:
        widths = [max(len(line[i]) for line in [header, *cells]) for i in range(len(header))]
        over = sum(widths) + 2 * (len(widths) - 1) - WIDTH
        texts = [header.index(name) for name in ("experiment", "metric") if name in header]
        column = max(texts, key=lambda i: widths[i], default=None)
        if over <= 0 or column is None or widths[column] <= _MIN_TEXT:
            return
        keep = max(_MIN_TEXT, widths[column] - over)
        for line in cells:
            if len(line[column]) > keep:
                line[column] = line[column][: keep - 1] + "…"


def _aligned(header: Sequence[str], cells: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(line[i]) for line in [header, *cells]) for i in range(len(header))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)
                      ).rstrip() for line in [header, ["-" * w for w in widths], *cells]]


def wrapped(text: str) -> list[str]:
    """A paragraph as lines of at most WIDTH characters, continued lines indented."""
    indent = text[: len(text) - len(text.lstrip(" "))]
    return textwrap.wrap(clean_text(text, None), WIDTH, initial_indent=indent,
                         subsequent_indent=indent + "  ", break_on_hyphens=False) or [""]


def _others(comparison: Comparison) -> list[ComparisonRow]:
    """The rows --verbose adds: diagnostics, and metrics that were not tested."""
    return [row for row in comparison.rows if not (row.gated and row.test is not None)]


def notes(comparison: Comparison, verbose: bool) -> list[str]:
    """The paragraphs after the tables: what one side lacks, the hardware, how rows were
    tested, what could not be resolved."""
    from harness.compare.rows import SUGGESTED_REPEATS, UNRESOLVED

    found = []
    sides = (("baseline", comparison.only_in_baseline), ("candidate", comparison.only_in_candidate))
    if verbose:
        found += [f"only in {side}: {group.workload} ({group.label})"
                  for side, groups in sides for group in groups]
    elif any(groups for _, groups in sides):
        counts = [f"{len(groups)} experiment{'s' if len(groups) != 1 else ''} only in {side}"
                  for side, groups in sides if groups]
        found.append("; ".join(counts) + " (--verbose names them)")
    found += [f"different hardware: this is a hardware comparison ({note})"
              for note in comparison.hardware_notes()]
    if any(row.test is not None and row.test.level == "summary" for row in comparison.rows):
        found.append("rows measured 'summary' come from summary statistics alone (mean, stddev, "
                     "rounds; no per-round data in the file): ratio of means, delta-method CI, "
                     "Welch's t-test")
    unresolved = sorted((row for row in comparison.gated if row.verdict == UNRESOLVED),
                        key=_severity, reverse=True)
    if unresolved:
        shown = unresolved if verbose else unresolved[:3]
        more = len(unresolved) - len(shown)
        found.append(
            f"{len(unresolved)} change(s) beyond the threshold are smaller than the two sides "
            "can resolve (their stated 95% intervals and the spread between repeats, in "
            "quadrature; or the run-to-run noise of the machine's history), so none is called "
            "a regression: " + "; ".join(f"{row.workload} {catalogue.heading_of(row.metric)} "
                                         f"{change_text(row.ratio)} within +/-"
                                         f"{row.resolution_pct:.1f}%" for row in shown)
            + (f"; and {more} more (--verbose)" if more else "")
            + ". Measure to a tighter --target-ci, or with more --repeat.")
    if any(row.test is not None and row.test.level == "samples" for row in comparison.rows):
        found.append("where a side has one run of an experiment, its steps are the samples; "
                     "they share that run's machine state, so run-to-run variation is not in "
                     f"the interval (repeat runs, e.g. --repeat {SUGGESTED_REPEATS}, make runs "
                     "the unit)")
    if not verbose and _others(comparison):
        found.append(f"{len(_others(comparison))} diagnostic or untested row(s) not shown "
                     "(--verbose shows them; they never fail the gate)")
    return found


def render(comparison: Comparison, verbose: bool = False) -> str:
    """The text output: the verdict, the gated metrics, (--verbose) the others, the notes."""
    lines = wrapped(verdict(comparison))
    for title, rows in (("", comparison.gated),
                        ("Diagnostics and untested metrics (never fail the gate):",
                         _others(comparison) if verbose else [])):
        if rows:
            header, cells = table(comparison, rows)
            lines += ["", *([title] if title else []), *_aligned(header, cells)]
            lines += [line for text in under_table(comparison, rows, verbose)
                      for line in wrapped(text)]
    found = notes(comparison, verbose)
    if found:
        lines.append("")
        lines += [line for text in found for line in wrapped(text)]
    return "\n".join(lines)


def markdown(comparison: Comparison, verbose: bool = False, title: str = "dtbench compare"
             ) -> str:
    """The same for a pull-request comment or $GITHUB_STEP_SUMMARY: a heading with the verdict
    mark, the verdict line, the gated metrics' table, the notes."""
    mark = "❌" if comparison.failed else "✅"
    lines = [f"### {title} {mark}", "", markdown_text(verdict(comparison), None), ""]
    for title, rows in (("", comparison.gated),
                        ("Diagnostics and untested metrics (never fail the gate)",
                         _others(comparison) if verbose else [])):
        if rows:
            header, cells = table(comparison, rows, fit=False)
            under = under_table(comparison, rows, verbose)
            lines += [f"**{title}**", ""] if title else []
            lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            lines += ["| " + " | ".join(markdown_text(cell, None) for cell in line) + " |"
                      for line in cells]
            lines += [""] + [line for text in under for line in (markdown_text(text, None), "")]
    lines += [f"- failed: {markdown_text(run)}" for run in comparison.failed_runs]
    lines += [f"- {markdown_text(text, None)}" for text in notes(comparison, verbose)]
    lines.append(f"{len(comparison.gated)} gated metric(s) compared; threshold "
                 f"{comparison.threshold_pct:g}%, Holm-corrected.")
    return "\n".join(lines) + "\n"
