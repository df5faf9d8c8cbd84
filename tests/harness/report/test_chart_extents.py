"""Every chart of the HTML report keeps its tick labels and legends inside its figure
(matplotlib's text extents after drawing), and colours its bars by machine: the published
records of three machines (every kind of plot but time to train and convergence), and
generated records of three machines with long names (those two as well)."""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from chart_extents import measured_charts, outside
from report_records import standard_set, time_to_train, write_store
from test_published_results import RESULTS, published_records

from harness.commands.cli import main

LONG_NAMES = ("a-build-machine-with-a-rather-long-name-01", "b-build-machine-with-a-long-name",
              "c-short")


def long_named_fleet() -> list[dict[str, Any]]:
    records = []
    for index, name in enumerate(LONG_NAMES):
        for record in [*standard_set(), time_to_train(f"20240102T030601Z-ttt-{index}")]:
            record["run_id"] = f"{record['run_id']}-{index}"
            record["machine"] = {**record["machine"], "name": name}
            quality = next((m for m in record["metrics"] if m["name"] == "quality"), None)
            if quality is not None:
                quality["history"] = [{"seconds": 10.0, "accuracy": 0.5},
                                      {"seconds": 20.0 + index, "accuracy": 0.92}]
            records.append(record)
    return records


def test_the_detector_finds_a_label_outside_its_figure() -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(3, 2), dpi=100)  # no layout: a long rotated label is cut
    FigureCanvasAgg(figure)
    axes = figure.subplots()
    axes.set_xticks([0, 1, 2], ["short", "a tick label far too long for this figure " * 2,
                                "cut to fi…"], rotation=30, ha="right")
    axes.legend(handles=axes.plot([0, 2], [0, 1], label="a legend"), loc="upper left",
                bbox_to_anchor=(1.5, 1))
    found = outside(figure)
    assert any("far too long" in what for what in found) and "the legend of ''" in found
    assert any("cut to fi…" in what for what in found)
    empty = Figure(figsize=(3, 2))
    FigureCanvasAgg(empty)
    assert outside(empty) == []  # nothing drawn, nothing outside


def _report(store: Path, out: Path) -> list[tuple[int, list[str]]]:
    with measured_charts() as found:
        assert main(["report", str(store), "-o", str(out)]) == 0
    return found


def test_the_reports_charts_of_long_named_machines_fit(tmp_path: Path) -> None:
    found = _report(write_store(tmp_path / "store", long_named_fleet()), tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    assert len(found) == page.count("<img") >= 6  # ttt and convergence among them
    assert [(number, what) for number, what in found if what] == []


def test_the_published_reports_charts_fit(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    copy = tmp_path / "results"
    for path in published_records():
        (copy / path.relative_to(RESULTS)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, copy / path.relative_to(RESULTS))
    monkeypatch.chdir(tmp_path)
    found = _report(Path("results"), tmp_path / "r.html")
    assert len(found) >= 6
    assert [(number, what) for number, what in found if what] == []


def _bar_colours(records: list[dict[str, Any]]) -> list[str]:
    from matplotlib.colors import to_hex
    from matplotlib.figure import Figure

    from harness.report.plots import throughput_plot
    from harness.report.view import views_of

    drawn: list[Figure] = []
    original = Figure.savefig

    def keep(figure: Figure, *args: Any, **kwargs: Any) -> Any:
        drawn.append(figure)
        return original(figure, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Figure, "savefig", keep)
        throughput_plot(views_of(records))
    return [to_hex(bar.get_facecolor()) for axes in drawn[0].axes for bar in axes.patches]


def test_throughput_bars_are_coloured_by_machine() -> None:
    """One machine's fp32 and bf16 bars share its colour; three machines' fp32 bars have
    three (the chart was coloured by precision)."""
    fleet = long_named_fleet()
    one = [r for r in fleet if r["machine"]["name"] == LONG_NAMES[0]
           and r["run_id"].startswith(("20240102T030405Z", "20240102T030406Z"))]
    assert {r["spec"]["precision"] for r in one} == {"fp32", "bf16"}
    assert len(_bar_colours(one)) == 2 and len(set(_bar_colours(one))) == 1
    fp32 = [r for r in fleet if r["run_id"].startswith("20240102T030405Z")]
    assert len(fp32) == 3 and len(set(_bar_colours(fp32))) == 3
