"""RAPL through Linux powercap on a generated tree: domains found (package and DRAM, not the
core subzone inside the package), wraparound handled, unreadable counters said; and a real
2-rank run drawing a known power, counted once per node."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from backends.powercap import PowercapMeter, PowercapUnavailable, find_zones

ROOT = Path(__file__).resolve().parents[2]


def make_tree(root: Path, max_uj: int = 10**9) -> dict[str, Path]:
    zones = {"package": root / "intel-rapl:0", "dram": root / "intel-rapl:0:0",
             "core": root / "intel-rapl:0:1", "psys": root / "intel-rapl:1"}
    for name, path in zones.items():
        path.mkdir(parents=True)
        (path / "name").write_text(("package-0" if name == "package" else name) + "\n")
        (path / "energy_uj").write_text("0\n")
        (path / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return zones


def set_uj(zone: Path, value: int) -> None:
    tmp = zone / "energy_uj.tmp"
    tmp.write_text(f"{value}\n")
    os.replace(tmp, zone / "energy_uj")


def test_package_and_dram_are_the_domains(tmp_path: Path) -> None:
    make_tree(tmp_path)
    assert sorted(z.name for z in find_zones(tmp_path)) == ["dram", "package-0"]
    with pytest.raises(PowercapUnavailable, match="no RAPL energy counter"):
        find_zones(tmp_path / "empty")


def test_a_counter_that_wraps_is_counted_through_the_wrap(tmp_path: Path) -> None:
    zones = make_tree(tmp_path, max_uj=1_000_000)
    set_uj(zones["package"], 900_000)
    meter = PowercapMeter(tmp_path, interval_s=3600)  # samples only when asked here
    set_uj(zones["package"], 100_000)  # +200,000 through the wrap at 1,000,000
    set_uj(zones["dram"], 50_000)
    domains = meter.by_domain()
    meter.close()
    assert sorted(domains.values()) == [pytest.approx(0.05), pytest.approx(0.2)]
    assert meter.wraps == 1 and meter.joules() == pytest.approx(0.25)


def test_an_unreadable_counter_is_said(tmp_path: Path) -> None:
    zones = make_tree(tmp_path)
    for name in ("package", "dram"):
        (zones[name] / "energy_uj").unlink()
        (zones[name] / "energy_uj").mkdir()  # reading it fails, as for a non-root user
    with pytest.raises(PowercapUnavailable, match="not readable by this process"):
        find_zones(tmp_path)


@pytest.mark.slow
def test_two_ranks_on_one_node_count_the_package_once(tmp_path: Path) -> None:
    """A package drawing 40 W and a DRAM drawing 10 W, their counters wrapping every 1.5 s:
    a 2-rank gloo run reports power within 5% of 50 W (not 100: both ranks read the same
    node's zones), and energy_per_sample is power over throughput."""
    zones = make_tree(tmp_path / "powercap", max_uj=60_000_000)
    stop = threading.Event()
    started = time.perf_counter()

    def draw() -> None:
        while not stop.is_set():
            elapsed = time.perf_counter() - started
            set_uj(zones["package"], int(40e6 * elapsed) % 60_000_000)
            set_uj(zones["dram"], int(10e6 * elapsed) % 60_000_000)
            time.sleep(0.01)

    writer = threading.Thread(target=draw, daemon=True)
    writer.start()
    try:
        env = {**os.environ, "DTBENCH_POWERCAP_ROOT": str(tmp_path / "powercap")}
        done = subprocess.run(
            [sys.executable, "-m", "harness", "run", "-w", "hep_cnn", "--size", "tiny", "-n",
             "2", "--comm", "gloo", "--threads", "1", "--target-ci", "0.01", "--max-time", "4",
             "--peak", "cached", "--out", str(tmp_path / "store"), "--json",
             str(tmp_path / "run.json"), "-q"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    finally:
        stop.set()
        writer.join()
    assert done.returncode == 0, done.stderr[-2000:]
    (record,) = json.loads((tmp_path / "run.json").read_text())
    metrics = {m["name"]: m for m in record["metrics"]}
    assert len(metrics["energy"]["by_domain"]) == 2 and metrics["energy"]["devices"] == 2
    assert metrics["power"]["value"] == pytest.approx(50.0, rel=0.05)
    assert "package" in metrics["energy"]["covers"][0] and "imprecise" in metrics["power"]
    per_sample = metrics["power"]["value"] / metrics["throughput"]["value"]
    assert metrics["energy_per_sample"]["value"] == pytest.approx(per_sample, rel=0.05)


def test_without_a_counter_energy_is_absent_with_the_reason(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    """As on this machine (no /sys/class/powercap): no energy metric, the reason in the
    record's notes."""
    from harness.rank.loops import run_throughput
    from harness.run.collect import collect_run
    from harness.spec.specs import RunSpec
    from harness.store.directory import Store

    monkeypatch.setenv("DTBENCH_POWERCAP_ROOT", str(tmp_path / "none"))
    spec = RunSpec(workload="hep_cnn", size="tiny", batch_per_rank=4, steps=2, warmup=1,
                   threads=1, peak="cached")
    result = run_throughput(spec)
    assert result.energy_joules is None and "no RAPL energy counter" in result.energy_reason
    collected = collect_run(spec, [result], None, Store(tmp_path / "store"))
    assert "energy" not in {m.name for m in collected.metrics}
    assert "no RAPL energy counter" in collected.notes["energy_unavailable"]
