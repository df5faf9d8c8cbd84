"""The loader-worker curve of the HTML report: throughput of runs fed by --data files against
their loader workers, beside the same configuration's synthetic throughput (drawn where a
report holds runs with --data)."""
from __future__ import annotations

import statistics
from pathlib import PurePath

from harness.report.plots import Plot, _figure, _label, _png, _success, several_machines
from harness.report.view import RecordView, clean_text

SAME_RUN = ("workload", "size", "backend", "precision", "world_size", "batch_per_rank")


def _workers(view: RecordView) -> int | None:
    value = view.spec.get("loader_workers", 0)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 \
        else None


def loader_plot(views: list[RecordView]) -> Plot:
    """Throughput against loader workers, a line per dataset and configuration; the synthetic
    run of the same configuration dashed."""
    title = "Input pipeline"
    having = _success(views, "throughput")
    fed = [v for v in having if v.spec.get("data") and _workers(v) is not None]
    if not fed:
        return Plot(title, "", "No successful run read --data files: the loader plot is "
                    "omitted.")
    several = several_machines(having)
    lines: dict[tuple[str, ...], list[tuple[int, float]]] = {}
    for view in fed:
        same = tuple(view.text(name) for name in SAME_RUN)
        name = PurePath(str(view.spec["data"])).name
        key = (*same, name, view.machine_label if several else "")
        lines.setdefault(key, []).append((_workers(view) or 0, view.value("throughput") or 0.0))
    figure = _figure(7.5, 4.2)
    axes = figure.subplots()
    for index, (key, points) in enumerate(sorted(lines.items())):
        points.sort()
        colour = f"C{index % 10}"
        label = f"{key[0]}/{key[1]} {key[3]} ×{key[4]} bs {key[5]}: {key[6]}" + \
            (f" ({key[7]})" if key[7] else "")
        xs = sorted({x for x, _ in points})
        axes.plot(xs, [statistics.median(y for x2, y in points if x2 == x) for x in xs],
                  marker="o", color=colour, label=_label(label, 70))
        axes.plot([p[0] for p in points], [p[1] for p in points], linestyle="", marker=".",
                  color=colour, alpha=0.4)  # every run
        synthetic = [v.value("throughput") or 0.0 for v in having if not v.spec.get("data")
                     and tuple(v.text(n) for n in SAME_RUN) == key[:6]
                     and (not key[7] or v.machine_label == key[7])]
        if synthetic:
            axes.axhline(statistics.median(synthetic), color=colour, linestyle="--", linewidth=1,
                         label=_label(f"{key[0]}/{key[1]} synthetic", 70))
    workers = sorted({x for points in lines.values() for x, _ in points})
    axes.set_xticks(workers, [str(x) for x in workers])
    axes.set_xlabel("loader worker processes")
    axes.set_ylabel("samples/s")
    axes.set_ylim(bottom=0)
    axes.legend(fontsize="small")
    names = ", ".join(sorted({clean_text(k[0], 30) for k in lines}))
    return Plot(title, f"Line chart of training throughput against loader worker processes "
                f"for runs of {names} reading files, with the synthetic throughput of the same "
                "configuration dashed.",
                "Throughput of runs fed by --data files against their loader workers (the line: "
                "the median of the runs, dots: each run); dashed: the same configuration on "
                "synthetic data (median).",
                _png(figure))
