"""The machine's load during a run: counted from /proc/stat and this process's own CPU time,
marked busy beyond the documented shares, shown by report and warned of by compare."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.commands.cli import main
from harness.machine.load import (
    BUSY_OTHER_SHARE,
    BUSY_STEAL_SHARE,
    CpuSample,
    load_between,
)


def _sample(busy: float, steal: float, total: float, own: float) -> CpuSample:
    return CpuSample(busy_s=busy, steal_s=steal, total_s=total, own_s=own, wall_s=total / 2,
                     loadavg=(1.0, 1.0, 1.0))


def test_others_cpu_time_is_the_machine_s_less_the_run_s() -> None:
    before = _sample(100.0, 0.0, 200.0, 10.0)
    quiet = load_between(before, _sample(119.0, 0.0, 220.0, 28.0))  # others: 1 s of 20
    assert quiet is not None and quiet["other_cpu_s"] == pytest.approx(1.0)
    assert quiet["other_cpu_share"] == pytest.approx(0.05) and quiet["busy"] is False
    busy = load_between(before, _sample(120.0, 0.0, 220.0, 10.0))  # others: all 20 s
    assert busy is not None and busy["busy"] is True
    assert f"{BUSY_OTHER_SHARE:.0%}" in busy["busy_reason"]
    stolen = load_between(before, _sample(102.0, 2.0, 220.0, 12.0))  # steal 10% of 20 s
    assert stolen is not None and stolen["busy"] is True
    assert f"{BUSY_STEAL_SHARE:.0%}" in stolen["busy_reason"]
    assert load_between(None, before) is None


def _machine(cpus: int, other_cores: float, wall: float = 10.0) -> tuple[CpuSample, CpuSample]:
    """Samples `wall` seconds apart on a `cpus`-core machine where others used `other_cores`
    on average and the run (its own CPU time) nothing."""
    return (CpuSample(0.0, 0.0, 0.0, 0.0, 0.0, None),
            CpuSample(other_cores * wall, 0.0, cpus * wall, 0.0, wall, None))


@pytest.mark.parametrize("cpus, run_cores, other_cores, busy", [
    (64, 4, 6.0, False),     # others on cores the run left free: nothing taken from it
    (64, 64, 8.0, True),     # a run on every core: 8 of its 64 cores taken (12.5%)
    (64, 60, 8.0, False),    # 4 free cores, others used 8: 4 of the run's 60 (6.7%)
    (2, 1, 4 / 3, True),     # the 2-core machine, 1 thread beside 2 spinners: 1/3 core
    (2, 1, 0.9, False),      # one core of 2 left free and others used less than it
    (2, None, 0.3, True),    # unknown run cores: the run counts as using the machine
])
def test_others_count_where_they_take_the_runs_cores(cpus: int, run_cores: int | None,
                                                     other_cores: float, busy: bool) -> None:
    load = load_between(*_machine(cpus, other_cores), run_cores=run_cores)
    assert load is not None and load["cpus"] == cpus
    taken = max(0.0, other_cores - (cpus - (run_cores or cpus))) / (run_cores or cpus)
    assert load["other_share_of_run_cores"] == pytest.approx(taken, abs=1e-4)
    assert load["busy"] is busy, load


@pytest.fixture
def spinners() -> object:
    """Two processes that keep both cores busy for as long as the test needs them."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait()


def test_a_run_beside_two_spinning_processes_is_marked_busy(
        tmp_path: Path, spinners: object, capsys: pytest.CaptureFixture[str]) -> None:
    # The run takes both cores: a 1-thread run beside two spinners may be left one core of its
    # own by the scheduler (measured here: the rank took 0.97 of a core), so nothing of it is
    # taken and no mark is due.
    store = tmp_path / "store"
    assert main(["run", "-w", "hep_cnn", "--size", "tiny", "--steps", "4", "--warmup", "1",
                 "--threads", "2", "-q", "--out", str(store)]) == 0
    (path,) = store.rglob("*.json")
    record = json.loads(path.read_text())
    load = record["load"]
    assert load["busy"] is True and load["other_cpu_share"] > BUSY_OTHER_SHARE, json.dumps(load)
    assert "other processes took" in load["busy_reason"]
    assert load["run_cores"] == 2 and load["cpus"] == 2  # --threads 2, from the rank itself
    summary = capsys.readouterr().out  # the run's own summary table
    assert "success (busy)" in summary and "measured on a busy machine" in summary
    assert main(["report", str(store)]) == 0
    text = capsys.readouterr().out
    assert "success (busy)" in text and "measured on a busy machine" in text
    assert main(["report", str(store), "-o", str(tmp_path / "report.html")]) == 0
    page = (tmp_path / "report.html").read_text()
    assert "success (busy)" in page and "measured on a busy machine" in page
    assert main(["report", str(store), "--by", "machine"]) == 0
    assert "measured on a busy machine" in capsys.readouterr().out
    assert main(["compare", str(store), str(store)]) == 0
    assert "run(s) measured on a busy machine" in capsys.readouterr().err


def test_a_quiet_run_is_not_marked(capsys: pytest.CaptureFixture[str]) -> None:
    """The same tables with the run's own CPU time taking all the machine's busy time: no
    mark anywhere (the spinning test above is the busy side of the same code)."""
    from harness.run.summary_table import summary_table

    record = {"status": "success", "error": None, "metrics": [],
              "spec": {"workload": "hep_cnn", "size": "tiny", "backend": "cpu",
                       "precision": "fp32", "world_size": 1, "batch_per_rank": 8},
              "load": load_between(_sample(100.0, 0.0, 200.0, 10.0),
                                   _sample(118.0, 0.0, 220.0, 28.0))}
    assert record["load"]["busy"] is False and record["load"]["other_cpu_s"] == 0.0
    text = summary_table([record])
    assert "success" in text and "busy" not in text


def test_no_published_record_has_an_mfu_above_one() -> None:
    root = Path(__file__).resolve().parents[3] / "results"
    found = []
    for path in root.rglob("*.json"):
        try:
            record = json.loads(path.read_text())
        except ValueError:
            continue
        if isinstance(record, dict):
            # the value, each step's sample and the ratio to each peak reading are all MFUs
            found += [(path.name, figure) for m in record.get("metrics") or []
                      if isinstance(m, dict) and m.get("name") == "mfu"
                      and m.get("value") is not None
                      for figure in [m["value"], *(m.get("samples") or []), *(
                          (m.get("extra") or {}).get("against_each_reading") or {}).values()]
                      if figure is not None]
    assert found, "results/ should hold records with MFU"
    assert all(value <= 1.0 for _, value in found), [f for f in found if f[1] > 1.0]
