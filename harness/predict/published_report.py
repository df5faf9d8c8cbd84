"""What `dtbench predict --validate-published` prints: every published row beside its
prediction and 90% interval, the summary and the coverage, each row outside its interval
decomposed (compute, exposed communication, the wait for stragglers) with the inputs it used
and what the model lacks for it, and the published pairs of strategies on one cluster ranked
(harness/predict/published.py predicts the rows)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.core.errors import EXIT_OK
from harness.predict.published import (
    PublishedRow,
    load_table,
    predict_row,
    row_inputs,
    summary,
)
from harness.predict.ranking import order_probability
from harness.predict.uncertain import LEVEL, coverage, half_width

HEADER = ("row", "metric", "devices", "published", "predicted", f"{LEVEL:.0%} interval",
          "inside", "error", "perfect scaling", "its error", "source checked")
LOWER_IS_BETTER = ("time_to_train_min",)


def cells(row: PublishedRow) -> list[str]:
    """One row of the table."""
    interval = row.interval
    return [row.row["id"], row.row["metric"],
            f"{row.row.get('baseline_devices', 1)}->{row.row['devices']}",
            f"{row.published:.3g}", f"{row.predicted:.3g}",
            f"{interval[0]:.3g}-{interval[1]:.3g}" if interval else "exact",
            {True: "yes", False: "no", None: "-"}[row.inside], f"{row.error * 100:+.1f}%",
            f"{row.perfect:.3g}", f"{row.perfect_error * 100:+.1f}%",
            "yes" if row.row.get("verified") else "no"]


def row_coverage(rows: list[PublishedRow]) -> str:
    """Coverage over the rows, and how many rows have no stated range at all."""
    found = coverage((row.interval or (row.predicted, row.predicted), row.predicted,
                      row.published) for row in rows)
    exact = sum(row.interval is None for row in rows)
    return found.line() + (f"; {exact} row(s) with no stated range: their interval is the "
                           "prediction itself" if exact else "")


def decomposition(row: PublishedRow) -> list[str]:
    """Where a missed row's predicted step goes, the inputs it used, and its note."""
    estimate = row.point.estimate
    step = estimate.step_time
    exposed = max(0.0, step - estimate.compute_time - estimate.overhead)
    wait = row.point.wait
    compute = row.row["compute"]
    rate = compute.get("curve") or f"{compute.get('flops'):g} FLOP/s"
    like = f" (as {compute['like']})" if compute.get("like") else ""
    ranged = ", ".join(u.name for u in row.inputs) or "none"
    width = f", half-width {half_width(row.interval, row.predicted):.1%}" \
        if row.interval else ""
    return [
        f"{row.row['id']}: {'above' if row.error > 0 else 'below'} its interval "
        f"(error {row.error * 100:+.1f}%{width})",
        f"  a step at {row.point.nodes} devices: {step * 1e3:.1f} ms = compute "
        f"{(estimate.compute_time - wait) * 1e3:.1f} ms + waiting for stragglers "
        f"{wait * 1e3:.1f} ms + exposed communication {exposed * 1e3:.1f} ms"
        + (f" + own work {estimate.overhead * 1e3:.1f} ms" if estimate.overhead else ""),
        f"  inputs: {row.row['model']} {row.row['strategy']}, batch {row.row['batch']} a device,"
        f" one device {rate}{like} ({compute['source']}), {row.row['topology']}"
        + (f", fusion {row.row['fusion']}" if row.row.get("fusion") else "")
        + f"; stated ranges: {ranged}",
        f"  the model lacks: {row.row.get('lacks') or 'not said'}"]


def pair_lines(document: dict[str, Any], rows: dict[str, PublishedRow]) -> list[str]:
    """Each published pair of strategies on one cluster: measured and predicted order."""
    lines = []
    for pair in document.get("pairs") or ():
        if not all(name in rows for name in pair["rows"]):
            continue  # a table of some rows only (--validate-published FILE)
        a, b = (rows[name] for name in pair["rows"])
        sign = -1 if a.row["metric"] in LOWER_IS_BETTER else 1
        measured = sign * (a.published - b.published) > 0
        predicted = sign * (a.predicted - b.predicted) > 0
        first, second = (a, b) if predicted else (b, a)
        columns = [[sign * v for v in first.draws], [sign * v for v in second.draws]]
        probability = order_probability(columns) if first.draws and second.draws else None
        sure = f"{probability:.0%} of draws" if probability is not None else "no stated range"
        lines.append(f"{pair['id']}: published {a.row['strategy']} {a.published:.3g} against "
                     f"{b.row['strategy']} {b.published:.3g}; predicted {a.predicted:.3g} "
                     f"against {b.predicted:.3g}: the order "
                     f"{'agrees' if measured == predicted else 'disagrees'} (predicted order "
                     f"holds in {sure}); {pair.get('where', '')}")
    return lines


def published_command(path: str | None) -> int:
    """Print every row (the built-in table or FILE's) against its prediction and interval,
    the summary and coverage, the misses decomposed and the pairs."""
    from harness.core.text import render_table

    document = load_table(Path(path) if path else None)
    ranges = document.get("ranges") or {}
    rows = [predict_row(row, row_inputs(row, ranges)) for row in document["rows"]]
    print(render_table(HEADER, [cells(row) for row in rows]))
    found = summary(rows)
    print(f"\n{found['rows']} rows: median |error| {found['median_abs_error']:.1%}, worst "
          f"{found['worst_abs_error']:.1%}, mean {found['mean_abs_error']:.1%} against perfect "
          f"scaling's mean {found['perfect_mean_abs_error']:.1%} (goal: median <= 5%, worst <= "
          "15%, mean at most a third of perfect scaling's)")
    print(row_coverage(rows))
    missed = [row for row in rows if row.inside is False]
    if missed:
        print(f"\nrows outside their {LEVEL:.0%} interval, decomposed:")
        for row in missed:
            print("\n".join(decomposition(row)))
    pairs = pair_lines(document, {row.row["id"]: row for row in rows})
    if pairs:
        print("\nstrategies ranked on one published cluster:")
        print("\n".join(pairs))
    if ranges:
        print("\nstated ranges: " + "; ".join(
            f"{name}: {r['input']} x{r['low']:g} to x{r['high']:g} ({r['source']})"
            for name, r in ranges.items()))
    print("sources: " + "; ".join(f"{key}: {value['title']} <{value['url']}>"
                                  for key, value in document["sources"].items()))
    return EXIT_OK
