"""The power benchmark's statistics (harness/compare/power.py) on synthetic pools: invocations
whose speed varies from one to the next by a known spread, some slowed by a known amount, the
gates counted as `dtbench gate` decides them. Nothing is timed."""
from __future__ import annotations

import importlib
import math
import subprocess
from pathlib import Path

import numpy as np
import pytest

from harness.compare import power
from harness.compare.command import Verdict
from harness.compare.detectable import bar_log, caught_probability
from harness.compare.rows import REGRESSION
from harness.records.record import Metric
from tests.harness.compare.test_compare import make_record, write

WORKLOADS = ("hep_cnn", "lstm")


def synthetic_pool(rounds: int, slowdowns: tuple[float, ...], spread: float, seed: int = 0,
                   repeats: int = 3, cpu_spread: float | None = None,
                   shift: tuple[int, float] = (0, 1.0)) -> list[power.Invocation]:
    """A pool as bench_gate_power.py makes one: per invocation and workload a speed drawn
    log-normally with sd `spread` (what one process keeps for its life), its repeats within
    0.1% of it; a slowed invocation's steps longer by 1 / (1 - slowdown). With `cpu_spread`
    each record has a cpu_time too (two threads busy each step: twice the step's seconds),
    its speed drawn apart with that spread and slowed alike. `shift` (index, factor): every
    invocation from that index on `factor` times as fast (what measures changed there)."""
    rng = np.random.default_rng(seed)
    pool = []
    for index, level in enumerate(power.plan(rounds, slowdowns)):
        records = []
        for workload in WORKLOADS:
            speed = math.exp(rng.normal(0.0, spread)) * (1.0 - level / 100.0) \
                * (shift[1] if index >= shift[0] else 1.0)
            cpu_speed = math.exp(rng.normal(0.0, cpu_spread or 0.0)) * (1.0 - level / 100.0)
            for repeat in range(repeats):
                run = speed * math.exp(rng.normal(0.0, 0.001))
                steps = list(rng.normal(0.010 / run, 0.000005 / run, 12))
                cpu = list(rng.normal(0.020 / cpu_speed, 0.00001 / cpu_speed, 12))
                extra = [Metric("cpu_time", "s", float(np.median(cpu)), False, samples=cpu)] \
                    if cpu_spread is not None else None
                record = make_record(f"{index}-{workload}-{repeat}", steps, workload=workload,
                                     spec_key=f"{workload:x<14}{'s' if level else 'k'}"[:16],
                                     extra_metrics=extra)
                record["created_at"] = f"2026-12-01T{index // 60:02d}:{index % 60:02d}:0{repeat}Z"
                record["spec"]["straggler"] = [0, power.straggler_factor(level)] if level \
                    else None
                records.append(record)
        pool.append(power.Invocation(index, level, tuple(records), 100.0 + index))
    return pool


def test_the_plan_alternates_the_same_commit_with_each_slowdown() -> None:
    assert power.plan(2, (2.0, 10.0)) == [0, 2, 0, 10, 0, 2, 0, 10]
    assert power.straggler_factor(5.0) == pytest.approx(1 / 0.95)


def test_gates_are_built_from_disjoint_candidates_alternating_in_time() -> None:
    pool = synthetic_pool(5, (2.0, 10.0), 0.01)
    history = power.gates_of(pool, "history")
    assert len(history) == len(pool)  # every invocation is a candidate once
    for gate in history:
        # the ten same-commit invocations, less the candidate itself
        assert len(gate.baseline) == (9 if gate.slowdown_pct == 0 else 10)
        assert all(run.slowdown_pct == 0 for run in gate.baseline)
        assert gate.candidate[0] not in gate.baseline
        assert gate.seconds == gate.candidate[0].seconds
    interleaved = power.gates_of(pool, "interleaved:2")
    # 5 slowed invocations a level: 2 gates of 2; 10 same-commit ones: 2 gates of 2 + 2
    assert sorted(g.slowdown_pct for g in interleaved) == [0, 0, 2, 2, 10, 10]
    for level in (0.0, 2.0, 10.0):
        used = [run.index for g in interleaved if g.slowdown_pct == level
                for run in g.baseline + g.candidate]
        assert len(used) == len(set(used))
    for gate in interleaved:
        if gate.slowdown_pct:  # each slowed run beside the same-commit run just before it
            assert [b.index + 1 for b in gate.baseline] == [c.index for c in gate.candidate]
        assert gate.seconds == sum(r.seconds for r in gate.baseline + gate.candidate)
    with pytest.raises(ValueError, match="interleaved:K"):
        power.gates_of(pool, "interleaved")


def test_history_of_groups_merges_consecutive_invocations_of_one_slowdown() -> None:
    """history:3: every three same-commit (or equally slowed) invocations in time order one
    commit of three invocations' records; a short group at the end dropped."""
    pool = synthetic_pool(7, (5.0,), 0.01, repeats=1)  # 7 same-commit, 7 slowed; 2 records
    merged = power.grouped(pool, 3)
    assert [(run.slowdown_pct, len(run.records)) for run in merged] == \
        [(0.0, 6), (5.0, 6), (0.0, 6), (5.0, 6)]
    assert merged[0].index == 0 and merged[1].index == 1 and merged[2].index == 6
    assert merged[0].seconds == sum(run.seconds for run in pool[0:6:2])
    gates = power.gates_of(pool, "history:3")
    assert len(gates) == 4 and all(len(g.candidate[0].records) == 6 for g in gates)
    assert power.gates_of(pool, "history:1") == power.gates_of(pool, "history")
    with pytest.raises(ValueError, match="history:G"):
        power.gates_of(pool, "history:0")


def test_a_slowed_run_reads_as_a_change_of_the_code() -> None:
    pool = synthetic_pool(1, (10.0,), 0.01)
    keys = power.spec_keys(pool)
    slowed = pool[1].records[0]
    change = power.as_change(slowed, keys)
    assert change["spec"]["straggler"] is None and slowed["spec"]["straggler"] is not None
    assert change["spec_key"] == pool[0].records[0]["spec_key"] != slowed["spec_key"]
    assert change["code"]["branch"] == "change"


def test_a_quiet_runner_catches_every_10_percent_and_no_2_percent_slowdown() -> None:
    """Invocations 0.5% apart: a 10% slowdown is far beyond the threshold and the history's
    floor, 2% is below the 5% threshold, and the same commit never alarms."""
    pool = synthetic_pool(5, (2.0, 10.0), 0.005)
    points = {p.slowdown_pct: p for p in power.curve(power.evaluate(pool, "history"),
                                                     WORKLOADS)}
    assert (points[0.0].gates, points[0.0].alarms) == (10, 0)
    assert (points[2.0].gates, points[2.0].alarms) == (5, 0)
    assert (points[10.0].gates, points[10.0].alarms) == (5, 5)
    assert points[10.0].per_workload == {"hep_cnn": 5, "lstm": 5}
    injected = power.injected(pool)
    assert injected[10.0]["lstm"] == pytest.approx(10.0, abs=1.0)
    assert set(power.spread(pool)) == set(WORKLOADS)
    assert all(v < 1.5 for v in power.spread(pool).values())  # drawn 0.5% apart
    assert injected[2.0]["hep_cnn"] == pytest.approx(2.0, abs=1.0)
    interleaved = {p.slowdown_pct: p for p in power.curve(
        power.evaluate(pool, "interleaved:2"), WORKLOADS)}
    assert interleaved[10.0].alarms == interleaved[10.0].gates == 2
    assert interleaved[0.0].alarms == 0


def test_the_history_gate_catches_as_often_as_its_floor_predicts() -> None:
    """Invocations 3% apart (log sd): a candidate's median and one history commit's differ by
    sd 3% x sqrt 2, and the gate calls a drop beyond its bar (the threshold, or the floor it
    estimated from the history, widened for the 4 gated metrics). Over 20 gates a 12%
    slowdown is caught as often as detectable.caught_probability gives for each gate's bar
    (the line the gate's summary prints rests on the same arithmetic), and the same commit
    about 5% of the time."""
    spread, level, rounds = 0.03, 12.0, 20
    pool = synthetic_pool(rounds, (level,), spread, seed=3)
    verdicts: list[tuple[power.Gate, Verdict]] = []

    def decider(gate: power.Gate, keys: dict[str, str], threshold: float) -> Verdict:
        verdicts.append((gate, power.decide(gate, keys, threshold)))
        return verdicts[-1][1]

    points = {p.slowdown_pct: p for p in power.curve(
        power.evaluate(pool, "history", decider=decider), WORKLOADS)}
    assert points[level].gates == rounds and points[0.0].gates == rounds
    rows = [row for gate, verdict in verdicts if gate.slowdown_pct == level
            for row in verdict.comparison.rows if row.metric == "throughput"]
    assert len(rows) == rounds * len(WORKLOADS)
    chances = [caught_probability(level, spread * math.sqrt(2),
                                  bar_log(5.0, row.resolution_pct)) for row in rows]
    caught = sum(row.verdict == REGRESSION for row in rows)
    sd = math.sqrt(sum(c * (1 - c) for c in chances))
    assert abs(caught - sum(chances)) <= 3 * sd, (caught, sum(chances))
    assert 0 < caught < len(rows)  # the slowdown is near the bar: neither always nor never
    assert points[0.0].alarms <= 2  # of 20


def test_a_pool_cut_where_what_measures_changed_compares_each_part_apart() -> None:
    """Invocations 0.5% apart whose speed steps 10% at invocation 20 (a pool resumed with
    another probe): across the step the same commit reads 10% apart and the history gate,
    whose nearest invocations straddle it, alarms on the same commit; cut there (--break 20),
    no gate's history reaches the other part, the spread is the 0.5% drawn and a 10%
    slowdown reads as 10%."""
    pool = synthetic_pool(20, (10.0,), 0.005, seed=2, repeats=1, shift=(20, 1.1))
    assert [len(part) for part in power.segments(pool, [20])] == [20, 20]
    assert power.segments(pool, [0, 40]) == [pool] and power.segments(pool) == [pool]
    assert all(v > 3.0 for v in power.spread(pool).values())
    assert all(v < 1.5 for v in power.spread(pool, [20]).values())
    assert power.injected(pool, [20])[10.0]["lstm"] == pytest.approx(10.0, abs=1.0)
    seen: list[power.Gate] = []

    def decider(gate: power.Gate, keys: dict[str, str], threshold: float) -> Verdict:
        seen.append(gate)
        return power.decide(gate, keys, threshold)

    cut = {p.slowdown_pct: p for p in power.curve(
        power.evaluate(pool, "history", decider=decider, breaks=[20]), WORKLOADS)}
    assert len(seen) == len(pool)
    for gate in seen:
        sides = {run.index >= 20 for run in gate.baseline + gate.candidate}
        assert len(sides) == 1  # never across the cut
    whole = {p.slowdown_pct: p for p in power.curve(power.evaluate(pool, "history"),
                                                    WORKLOADS)}
    assert (cut[0.0].alarms, cut[10.0].alarms) == (0, cut[10.0].gates)
    assert whole[0.0].alarms + whole[10.0].gates - whole[10.0].alarms > 0


def test_a_slowed_busy_run_reads_as_a_change_too() -> None:
    pool = synthetic_pool(1, (10.0,), 0.01)
    keys = power.spec_keys(pool)
    slowed = dict(pool[1].records[0], spec={**pool[1].records[0]["spec"],
                                            "straggler_work": "busy"})
    change = power.as_change(slowed, keys)
    assert change["spec"]["straggler"] is None and change["spec"]["straggler_work"] == "idle"
    assert change["spec_key"] == pool[0].records[0]["spec_key"]


def test_a_steadier_clock_keeps_the_catches_and_drops_the_false_alarms() -> None:
    """Wall clock 8% apart between invocations, CPU time 0.5% apart, both slowed 10%: on the
    wall clock the history gate alarms on the same commit and misses slowdowns; on the CPU
    clock it catches every one and never alarms (counted gates, nothing timed)."""
    pool = synthetic_pool(6, (10.0,), 0.08, seed=5, cpu_spread=0.005)
    wall = {p.slowdown_pct: p for p in power.curve(power.evaluate(pool, "history"),
                                                   WORKLOADS)}
    cpu = {p.slowdown_pct: p for p in power.curve(
        power.evaluate(power.on_clock(pool, "cpu"), "history"), WORKLOADS)}
    assert (cpu[0.0].gates, cpu[0.0].alarms) == (6, 0)
    assert (cpu[10.0].gates, cpu[10.0].alarms) == (6, 6)
    assert wall[0.0].alarms + (wall[10.0].gates - wall[10.0].alarms) > 0
    assert power.injected(power.on_clock(pool, "cpu"))[10.0]["lstm"] == pytest.approx(
        10.0, abs=1.5)


def test_the_table_has_a_row_per_slowdown_with_the_false_alarms_apart() -> None:
    pool = synthetic_pool(2, (10.0,), 0.005)
    text = power.table(power.curve(power.evaluate(pool, "history"), WORKLOADS), WORKLOADS,
                       "history")
    lines = text.splitlines()
    assert lines[2] == ("| slowdown | gates | candidate runs | caught | false alarms | hep_cnn | "
                        "lstm | wall time per gate |")
    assert lines[4].startswith("| 0 (same commit) | 2 | 2 |  | 0 / 2 | 0 | 0 |")
    assert lines[5].startswith("| 10% | 2 | 2 | 2 / 2 |  | 2 | 2 |")


def test_the_benchmark_resumes_its_pool_within_its_budget(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """bench_gate_power.py's pool: the plan's invocations in order, each slowed one with the
    straggler of its slowdown; an invocation the manifest lacks is made again on resuming,
    none past the budget; a pool of another configuration is refused."""
    bench = importlib.import_module("benchmarks.bench_gate_power")
    made: list[list[str]] = []
    template = synthetic_pool(1, (2.0,), 0.01)

    def run_here(*args: str) -> subprocess.CompletedProcess[str]:
        out = Path(args[args.index("--out") + 1])
        level = 2.0 if "--straggler" in args else 0.0
        for record in template[1 if level else 0].records:
            write(out / "bench" / f"{record['run_id']}.json", record)
        made.append(list(args))
        return subprocess.CompletedProcess(list(args), 0, "", "")

    monkeypatch.setattr(bench, "dtbench", run_here)
    root = tmp_path / "pool"
    bench.check_plan(root, "quick", [2.0], "idle")
    bench.make_pool(root, "quick", [2.0], 2, None)
    assert [("--straggler" in args) for args in made] == [False, True, False, True]
    assert made[1][made[1].index("--straggler") + 1] == "0:1.02041"
    assert made[1][made[1].index("--straggler-work") + 1] == "idle"
    manifest = root / bench.MANIFEST
    manifest.write_text("\n".join(manifest.read_text().splitlines()[:2]) + "\n")
    made.clear()
    bench.make_pool(root, "quick", [2.0], 3, 0.0)  # no budget: nothing more starts
    assert made == []
    bench.make_pool(root, "quick", [2.0], 3, None)
    assert len(made) == 4 and len(bench.finished(root)) == 6
    pool = bench.load_pool(root)
    assert [run.slowdown_pct for run in pool] == power.plan(3, (2.0,))
    assert all(len(run.records) == 6 for run in pool)
    cut = bench.report(pool, ["history"], 5.0, "quick", ["wall"], breaks=[2])
    assert cut["breaks"] == [2] and cut["modes"]["history/wall"][0]["gates"] == 2
    with pytest.raises(SystemExit, match="holds a pool"):
        bench.check_plan(root, "quick --repeat 9", [2.0], "idle")
    with pytest.raises(SystemExit, match="holds a pool"):
        bench.check_plan(root, "quick", [2.0], "busy")


def test_the_benchmark_decides_the_gates_as_the_gate_option_does(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """bench_gate_power.py --floor-decides: report() decides every gate through
    power.decide(floor_decides=True), and says so in its figures."""
    bench = importlib.import_module("benchmarks.bench_gate_power")
    pool = synthetic_pool(6, (5.0,), spread=0.01, seed=1)
    seen: list[bool] = []
    real = power.decide

    def spy(gate: power.Gate, keys: dict[str, str], threshold: float = 5.0,
            floor_decides: bool = False) -> Verdict:
        seen.append(floor_decides)
        return real(gate, keys, threshold, floor_decides)

    monkeypatch.setattr(power, "decide", spy)
    found = bench.report(pool, ["history"], 5.0, "quick", ["wall"], floor_decides=True)
    assert found["floor_decides"] is True and seen and all(seen)
