"""`dtbench compare`: spec matching, the ratio CI and rank test, verdicts and exit codes."""
from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.commands.cli import main
from harness.compare.matching import match_specs
from harness.compare.rows import compare_records
from harness.core.stats import RatioTest, bootstrap_ratio_ci, mann_whitney_p
from harness.facts.metrics import heading_of as heading
from harness.records.record import Metric

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "record_v1.json"
GLOBAL_BATCH = 16


def steady_steps(n: int = 12, seed: int = 0, mean: float = 0.010, noise: float = 0.0002
                 ) -> list[float]:
    """Step times of a quiet machine: small noise around `mean` (seeded, so reproducible)."""
    return list(np.random.default_rng(seed).normal(mean, noise, n))


def make_record(run_id: str, step_samples: list[float], *, workload: str = "hep_cnn",
                machine_id: str = "00112233aabbccdd", spec_key: str | None = "0123456789abcdef",
                extra_metrics: list[Metric] | None = None, **spec: Any) -> dict[str, Any]:
    """The golden record with step_time/throughput/derived metrics computed from step times."""
    record = json.loads(GOLDEN.read_text())
    record["run_id"] = run_id
    record["machine"]["machine_id"] = machine_id
    record["spec"].update(workload=workload, **spec)
    if spec_key is None:
        record.pop("spec_key")
    else:
        record["spec_key"] = spec_key
    throughput = [GLOBAL_BATCH / s for s in step_samples]
    metrics = [
        Metric("step_time", "s", float(np.median(step_samples)), False, samples=step_samples),
        Metric("throughput", "samples/s", float(np.median(throughput)), True, samples=throughput),
        Metric("flops_per_sample", "FLOP", 45e6, False),
        Metric("peak_flops", "FLOP/s", 1e11, True),
        *(extra_metrics or []),
    ]
    record["metrics"] = [m.as_dict() for m in metrics]
    return record


def scaled(record: dict[str, Any], run_id: str, name: str, factor: float) -> dict[str, Any]:
    """A copy of `record` whose `name` samples (and value) are multiplied by `factor`."""
    changed = copy.deepcopy(record)
    changed["run_id"] = run_id
    for entry in changed["metrics"]:
        if entry["name"] == name:
            entry["value"] *= factor
            if "samples" in entry:
                entry["samples"] = [s * factor for s in entry["samples"]]
    return changed


def write(path: Path, document: Any) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document))
    return str(path)


def verdict_line(text: str) -> str:
    """compare's verdict: its first line, with the lines that continue it (indented)."""
    first, *rest = text.strip().split("\n\n")[0].splitlines()
    assert all(line.startswith("  ") for line in rest)
    return " ".join([first, *(line.strip() for line in rest)])


@pytest.fixture
def baseline(tmp_path: Path) -> str:
    return write(tmp_path / "baseline.json", make_record("base-1", steady_steps()))


# --- command line ------------------------------------------------------------------------------

def test_same_file_exits_zero(baseline: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", baseline, baseline]) == 0
    out = capsys.readouterr().out
    assert verdict_line(out) == "no significant change in 2 gated metrics"
    assert "1.000" in out
    assert "FLOPs per sample" not in out and "peak FLOP/s" not in out


def test_slower_candidate_is_a_regression(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                          ) -> None:
    record = make_record("base-1", steady_steps())
    slower = scaled(scaled(record, "cand-1", "throughput", 0.8), "cand-1", "step_time", 1.25)
    base = write(tmp_path / "a.json", record)
    cand = write(tmp_path / "b.json", slower)
    assert main(["compare", base, cand]) == 1
    summary = verdict_line(capsys.readouterr().out)
    assert summary.startswith("regression: ")
    assert "hep_cnn throughput -20.0% [" in summary and "hep_cnn step time +25.0% [" in summary


@pytest.mark.parametrize("metric", ["phase_optimizer", "mfu", "achieved_flops"])
def test_diagnostics_are_tested_and_shown_but_never_fail_the_gate(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], metric: str) -> None:
    steps = steady_steps()
    diagnostic = Metric(metric, "s" if metric.startswith("phase_") else "1",
                        float(np.median(steps)), metric != "phase_optimizer",
                        samples=list(steps))
    record = make_record("base-1", steps, extra_metrics=[diagnostic])
    worse = 1.5 if metric.startswith("phase_") else 0.6
    changed = scaled(record, "cand-1", metric, worse)
    shown = heading(metric)
    assert main(["compare", write(tmp_path / "a.json", record),
                 write(tmp_path / "b.json", changed), "--json",
                 str(tmp_path / "c.json")]) == 0
    out = capsys.readouterr().out
    assert verdict_line(out) == "no significant change in 2 gated metrics"
    assert shown not in out and "1 diagnostic or untested row(s) not shown" in out
    assert main(["compare", write(tmp_path / "a.json", record),
                 write(tmp_path / "b.json", changed), "--verbose"]) == 0
    out = capsys.readouterr().out
    assert out.index("Diagnostics") < out.index(shown)
    assert next(line for line in out.splitlines() if shown in line).endswith(" regression")
    rows = json.loads((tmp_path / "c.json").read_text())["rows"]
    row = next(r for r in rows if r["metric"] == metric)
    assert row["verdict"] == "regression" and row["gated"] is False
    assert all(r["gated"] for r in rows if r["metric"] in ("throughput", "step_time"))
    # the same change of the throughput beside it still fails
    slower = scaled(changed, "cand-2", "throughput", 0.6)
    assert main(["compare", write(tmp_path / "a.json", record),
                 write(tmp_path / "d.json", slower)]) == 1
    assert verdict_line(capsys.readouterr().out).startswith(
        "regression: hep_cnn throughput -40.0% [")


def with_interval(record: dict[str, Any], achieved: float) -> dict[str, Any]:
    """The record as an adaptive run states it: each per-step figure's achieved interval."""
    for entry in record["metrics"]:
        if "samples" in entry:
            entry["interval_pct"] = {"achieved": achieved, "target": 2.0, "met": achieved <= 2}
    return record


@pytest.mark.parametrize("stated, verdict, code", [(None, "regression", 1),
                                                   (1.0, "regression", 1),
                                                   (6.0, "below resolution", 0)])
def test_a_change_the_sides_cannot_resolve_is_not_a_regression(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], stated: float | None,
        verdict: str, code: int) -> None:
    """An 8% slowdown, significant over the steps: a regression where the sides state +/-1%
    (1.4% together, in quadrature) or nothing; below resolution where each states +/-6%
    (8.5% together). The step time and the throughput get one verdict."""
    record = make_record("base-1", steady_steps(n=40))
    slower = scaled(scaled(record, "cand-1", "throughput", 0.926), "cand-1", "step_time", 1.08)
    if stated is not None:
        record, slower = with_interval(record, stated), with_interval(slower, stated)
    assert main(["compare", write(tmp_path / "a.json", record),
                 write(tmp_path / "b.json", slower), "--json", str(tmp_path / "c.json")]) == code
    out = capsys.readouterr().out
    rows = json.loads((tmp_path / "c.json").read_text())["rows"]
    throughput = next(row for row in rows if row["metric"] == "throughput")
    assert throughput["verdict"] == verdict
    step_time = next(row for row in rows if row["metric"] == "step_time")
    assert step_time["verdict"] == verdict
    assert throughput["resolution_pct"] == (None if stated is None
                                            else pytest.approx(math.sqrt(2) * stated))
    if verdict == "below resolution":
        assert "smaller than the two sides can resolve" in out
        assert "hep_cnn throughput -7.4% within +/-8.5%" in out


def test_improvement_is_not_a_regression(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                         ) -> None:
    record = make_record("base-1", steady_steps())
    faster = scaled(scaled(record, "cand-1", "throughput", 1.25), "cand-1", "step_time", 0.8)
    assert main(["compare", write(tmp_path / "a.json", record),
                 write(tmp_path / "b.json", faster)]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith(("throughput", "step time"))]
    assert len(rows) == 2 and all(row.endswith(" improved") for row in rows)
    summary = verdict_line(out)
    # one change an experiment: the rate, not its step time
    assert summary.startswith("no regression in 2 gated metrics; improved: hep_cnn throughput "
                              "+25.0% [+2") and summary.endswith("%]; and 1 more")


def test_noise_from_one_distribution_is_not_flagged(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(1234)
    noisy = {name: list(rng.normal(0.010, 0.0015, 30)) for name in ("a", "b")}
    a = make_record("run-a", noisy["a"])
    b = make_record("run-b", noisy["b"])
    # The medians differ by more than the 5% threshold by chance alone; only the CI and the
    # rank test keep this from being flagged, in either direction.
    ratios = {row.metric: row.ratio for row in compare_records([a], [b], 5.0).rows}
    assert abs(ratios["step_time"] - 1.0) > 0.05
    for first, second in ((a, b), (b, a)):
        base = write(tmp_path / "base.json", first)
        cand = write(tmp_path / "cand.json", second)
        assert main(["compare", base, cand]) == 0
        rows = [line.split() for line in capsys.readouterr().out.splitlines()
                if line.startswith(("step time", "throughput"))]
        assert [row[-1] for row in rows] == ["ok", "ok"]


def test_small_slowdown_is_below_the_threshold(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    steps = steady_steps(n=20, noise=0.00005)
    base = write(tmp_path / "a.json", make_record("base-1", steps))
    cand = write(tmp_path / "b.json", make_record("cand-1", [s * 1.03 for s in steps]))
    assert main(["compare", base, cand, "--threshold", "5"]) == 0
    capsys.readouterr()
    # The 3% change is real (significant), so a tighter threshold does flag it.
    assert main(["compare", base, cand, "--threshold", "2"]) == 1
    summary = verdict_line(capsys.readouterr().out)
    assert summary.startswith("regression: hep_cnn ") and summary.count("; ") == 1


def test_metric_without_samples_is_shown_but_never_flagged(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    steps = steady_steps()
    base = make_record("base-1", steps, extra_metrics=[Metric("energy", "J", 100.0, False)])
    cand = make_record("cand-1", steps, extra_metrics=[Metric("energy", "J", 150.0, False)])
    assert main(["compare", write(tmp_path / "a.json", base),
                 write(tmp_path / "b.json", cand), "--verbose"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "energy" in line)
    assert "1.500" in row and row.rstrip().endswith("no samples")


@pytest.mark.parametrize("name, unit, before, after, code", [
    ("peak_memory", "bytes", 1e9, 1.5e9, 1),     # 1.5x memory from one run a side: a regression
    ("time_to_train", "s", 100.0, 150.0, 1),
    ("peak_memory", "bytes", 1e9, 1.1e9, 0),     # within one run's spread: not gated alone
])
def test_peak_memory_and_time_to_train_gate(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            name: str, unit: str, before: float, after: float,
                                            code: int) -> None:
    steps = steady_steps()
    base = make_record("base-1", steps, extra_metrics=[Metric(name, unit, before, False)])
    cand = make_record("cand-1", steps, extra_metrics=[Metric(name, unit, after, False)])
    assert main(["compare", write(tmp_path / "a.json", base),
                 write(tmp_path / "b.json", cand)]) == code
    row = next(line for line in capsys.readouterr().out.splitlines()
               if line.startswith(heading(name)))
    assert row.rstrip().endswith("regression" if code else "ok")


def test_peak_memory_over_repeated_runs_is_tested_like_samples(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    steps = steady_steps()
    base = [make_record(f"base-{i}", steps, extra_metrics=[
        Metric("peak_memory", "bytes", 1e9 * (1 + 0.01 * i), False)]) for i in range(5)]
    cand = [make_record(f"cand-{i}", steps, extra_metrics=[
        Metric("peak_memory", "bytes", 1.15e9 * (1 + 0.01 * i), False)]) for i in range(5)]
    assert main(["compare", write(tmp_path / "a.json", base),
                 write(tmp_path / "b.json", cand)]) == 1
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("peak memory"))
    assert "5/5 in every row" in out and row.rstrip().endswith("regression")


def test_peak_memory_is_gated_against_its_own_run_to_run_spread(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Same-commit runs whose peak memory moved 0.93-1.07 (as lstm small's did between
    invocations): a candidate 6% up is within that spread, not a regression; 25% up is."""
    steps = steady_steps()
    spread = (0.93, 1.07, 0.95, 1.05, 0.97, 1.03, 0.99, 1.01, 0.94, 1.06)
    base = [make_record(f"base-{i}", steps, extra_metrics=[
        Metric("peak_memory", "bytes", 1e9 * f, False)]) for i, f in enumerate(spread)]
    near = [make_record(f"cand-{i}", steps, extra_metrics=[
        Metric("peak_memory", "bytes", 1.06e9 * (1 + 0.002 * i), False)]) for i in range(10)]
    assert main(["compare", write(tmp_path / "a.json", base),
                 write(tmp_path / "b.json", near)]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines()
               if line.startswith("peak memory"))
    assert "below resolution" in row or row.rstrip().endswith("ok")
    far = [make_record(f"far-{i}", steps, extra_metrics=[
        Metric("peak_memory", "bytes", 1.25e9 * (1 + 0.002 * i), False)]) for i in range(10)]
    assert main(["compare", write(tmp_path / "a.json", base),
                 write(tmp_path / "c.json", far)]) == 1


def test_a_failed_candidate_run_fails_the_gate(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    steps = steady_steps()
    failed = make_record("cand-2", steps)
    failed.update(status="failed", error="rank 1 exited with code 137", metrics=[])
    base = write(tmp_path / "a.json", make_record("base-1", steps))
    cand = write(tmp_path / "b.json", [make_record("cand-1", steps), failed])
    assert main(["compare", base, cand]) == 1
    captured = capsys.readouterr()
    assert "candidate run failed: hep_cnn cand-2: rank 1 exited with code 137" in captured.err
    assert verdict_line(captured.out) == "gate failed: 1 candidate run failed (hep_cnn)"
    assert main(["compare", base, cand, "--format", "md"]) == 1
    summary = capsys.readouterr().out
    assert summary.startswith("### dtbench compare ❌")
    assert "- failed: hep\\_cnn cand-2: rank 1 exited with code 137" in summary  # escaped
    # A failed run in the baseline is the past: it does not fail the candidate.
    assert main(["compare", cand, base]) == 0
    assert "failed" not in capsys.readouterr().err


def test_a_candidate_whose_only_run_failed_fails_the_gate(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The most common way a change breaks a benchmark is a regression (exit 1) that names the
    failed run, not misuse (exit 2); a candidate of skipped runs alone is still bad input."""
    failed = make_record("cand-1", steady_steps())
    failed.update(status="failed", error="ZeroDivisionError in the loss", metrics=[])
    base = write(tmp_path / "a.json", make_record("base-1", steady_steps()))
    report = tmp_path / "comparison.json"
    assert main(["compare", base, write(tmp_path / "b.json", failed), "--json",
                 str(report)]) == 1
    captured = capsys.readouterr()
    assert "candidate run failed: hep_cnn cand-1: ZeroDivisionError in the loss" in captured.err
    assert verdict_line(captured.out) == "gate failed: 1 candidate run failed (hep_cnn)"
    assert json.loads(report.read_text())["failed_runs"] == [
        "hep_cnn cand-1: ZeroDivisionError in the loss"]
    failed.update(status="skipped", error="no GPU")
    assert main(["compare", base, write(tmp_path / "c.json", failed)]) == 2


def test_a_baseline_without_a_fingerprint_is_unknown_hardware(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    steps = steady_steps()
    bare = make_record("base-1", steps)
    bare["machine"] = {"hostname": "old-runner"}
    assert main(["compare", write(tmp_path / "a.json", bare),
                 write(tmp_path / "b.json", make_record("cand-1", steps))]) == 0
    err = capsys.readouterr().err
    assert "baseline: unknown hardware" in err and "candidate: unknown" not in err


def test_stores_as_inputs_pool_repeats(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                       ) -> None:
    for repeat in range(2):
        steps = steady_steps(n=6, seed=repeat)
        write(tmp_path / "old" / f"base-{repeat}.json", make_record(f"base-{repeat}", steps))
        write(tmp_path / "new" / f"cand-{repeat}.json",
              make_record(f"cand-{repeat}", [s * 1.3 for s in steps]))
    write(tmp_path / "new" / "lstm.json", make_record("cand-lstm", steady_steps(), workload="lstm",
                                                      spec_key="fedcba9876543210"))
    assert main(["compare", str(tmp_path / "old"), str(tmp_path / "new"), "--json",
                 str(tmp_path / "cmp.json")]) == 1
    out = capsys.readouterr().out
    assert "1 experiment only in candidate (--verbose names them)" in out
    assert "lstm" not in out
    assert main(["compare", str(tmp_path / "old"), str(tmp_path / "new"), "--verbose"]) == 1
    assert "only in candidate: lstm (tiny/cpu/fp32/none/ws1/bs16)" in capsys.readouterr().out
    written = json.loads((tmp_path / "cmp.json").read_text())
    rows = {row["metric"]: row for row in written["rows"]}
    # Two runs a side: runs, not their 12 steps, are the unit of the statistics.
    assert rows["step_time"]["n_baseline"] == 2 and rows["step_time"]["n_candidate"] == 2
    assert rows["step_time"]["level"] == "runs"
    assert rows["step_time"]["verdict"] == "regression"
    assert rows["step_time"]["ratio"] == pytest.approx(1.3, rel=0.05)
    low, high = rows["step_time"]["ci95"]
    assert 1.0 < low <= high
    assert written["regressions"] == 2
    assert written["only_in_candidate"] == [{"workload": "lstm",
                                             "spec": "tiny/cpu/fp32/none/ws1/bs16"}]


def test_damaged_file_in_store_warns_and_is_skipped(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "store" / "good.json", make_record("base-1", steady_steps()))
    (tmp_path / "store" / "broken.json").write_text('{"schema_version": 1, "run_')
    assert main(["compare", str(tmp_path / "store"), str(tmp_path / "store")]) == 0
    captured = capsys.readouterr()
    assert "dtbench: warning:" in captured.err and "broken.json" in captured.err
    assert "step time (ms)" in captured.out


def test_side_without_readable_records_is_bad_usage(tmp_path: Path, baseline: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text("not json")
    assert main(["compare", baseline, str(broken)]) == 2
    err = capsys.readouterr().err
    assert err.count("dtbench compare: error:") == 1 and str(broken) in err.splitlines()[-1]


def test_different_machines_warn_but_pass(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    steps = steady_steps()
    base = write(tmp_path / "a.json", make_record("base-1", steps, machine_id="aaaa"))
    cand = write(tmp_path / "b.json", make_record("cand-1", steps, machine_id="bbbb"))
    assert main(["compare", base, cand]) == 0
    err = capsys.readouterr().err
    assert "dtbench: warning:" in err and "different machines" in err and "aaaa" in err
    assert main(["compare", base, base]) == 0
    assert "different machines" not in capsys.readouterr().err


def test_missing_path_is_one_line_exit_2(baseline: str, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    missing = str(tmp_path / "nowhere.json")
    assert main(["compare", baseline, missing]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and missing in captured.err and "Traceback" not in (
        captured.err)


@pytest.mark.parametrize("threshold", ["0", "abc", "100"])
def test_bad_threshold_is_exit_2(baseline: str, threshold: str,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", baseline, baseline, "--threshold", threshold]) == 2
    assert capsys.readouterr().err.startswith("dtbench compare: error:")


def test_json_is_written_without_nan(tmp_path: Path, baseline: str) -> None:
    target = tmp_path / "cmp.json"
    assert main(["compare", baseline, baseline, "--json", str(target)]) == 0
    text = target.read_text()
    assert "NaN" not in text
    written = json.loads(text)
    assert written["regressions"] == 0 and written["threshold_pct"] == 5.0
    assert {row["metric"] for row in written["rows"]} == {"step_time", "throughput"}
    assert all(row["verdict"] == "ok" and row["ratio"] == 1.0 for row in written["rows"])



def pytest_benchmark_file(path: Path, step_times: list[float]) -> str:
    """A minimal `--benchmark-json` file of one benchmark that timed `step_times`."""
    return write(path, {
        "machine_info": {"node": "bench01", "processor": "x86_64", "cpu": {"brand_raw": "Xeon"}},
        "commit_info": {}, "datetime": "2024-01-02T03:04:05+00:00", "version": "4.0.0",
        "benchmarks": [{"name": "test_train_step", "fullname": "bench.py::test_train_step",
                        "stats": {"data": step_times, "rounds": len(step_times)},
                        "extra_info": {"batch_size": GLOBAL_BATCH}}]})


def test_pytest_benchmark_files_compare_like_records(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    steps = steady_steps()
    base = pytest_benchmark_file(tmp_path / "0001_base.json", steps)
    cand = pytest_benchmark_file(tmp_path / "0002_cand.json", [s * 1.25 for s in steps])
    assert main(["compare", base, base]) == 0
    capsys.readouterr()
    assert main(["compare", base, cand]) == 1
    summary = verdict_line(capsys.readouterr().out)
    assert "step time +25.0%" in summary and "throughput -20.0%" in summary

# --- matching ----------------------------------------------------------------------------------

def comm_record(run_id: str, op: str, samples: list[float],
                sizes: tuple[int, ...] = (1024, 4096)) -> dict[str, Any]:
    record = make_record(run_id, steady_steps(), workload=f"comm-{op}", spec_key=None,
                         task="comm", op=op, sizes=list(sizes), mode="comm", size="-")
    record["metrics"] = [Metric("busbw", "GB/s", float(np.median(samples)), True,
                                samples=samples).as_dict()]
    return record


def test_comm_records_match_by_op() -> None:
    busbw = [1.0, 1.1, 0.9, 1.05, 0.95, 1.0, 1.02, 0.98]
    base = [comm_record("b-ar", "allreduce", busbw), comm_record("b-ag", "allgather", busbw)]
    cand = [comm_record("c-ar", "allreduce", [v * 0.5 for v in busbw])]
    comparison = compare_records(base, cand, 5.0)
    assert [(row.workload, row.spec, row.verdict) for row in comparison.rows] == [
        ("comm-allreduce", "cpu/fp32/none/ws1/allreduce/4K", "regression")]
    assert [group.workload for group in comparison.only_in_baseline] == ["comm-allgather"]
    # busbw is measured at the largest message size: a different sweep is a different spec.
    longer = [comm_record("c-ar", "allreduce", busbw, sizes=(1024, 2**26))]
    comparison = compare_records(base[:1], longer, 5.0)
    assert comparison.rows == []
    assert [g.label for g in comparison.only_in_candidate] == ["cpu/fp32/none/ws1/allreduce/64M"]


def test_spec_key_separates_specs_the_fields_do_not() -> None:
    steps = steady_steps()
    base = [make_record("b1", steps, spec_key="k1"), make_record("b2", steps, spec_key="k2")]
    cand = [make_record("c1", steps, spec_key="k1")]
    pairs, only_base, only_cand = match_specs(base, cand)
    assert [(b.records[0]["run_id"], c.records[0]["run_id"]) for b, c in pairs] == [("b1", "c1")]
    assert [g.records[0]["run_id"] for g in only_base] == ["b2"] and only_cand == []
    # A record without spec_key (a foreign file) falls back to the spec fields and pools all.
    pairs, _, _ = match_specs(base, [make_record("c1", steps, spec_key=None)])
    assert [len(b.records) for b, _ in pairs] == [2]


def test_records_without_spec_key_match_by_the_same_identity_rule_as_the_key() -> None:
    """The fallback is RunSpec.key()'s rule: threads (identity) separate, seed does not."""
    from harness.compare.matching import spec_differences

    steps = steady_steps()
    base = [make_record("b1", steps, spec_key=None, threads=4)]
    same = [make_record("c1", steps, spec_key=None, threads=4, seed=9)]
    other = [make_record("c2", steps, spec_key=None, threads=8)]
    assert len(match_specs(base, same)[0]) == 1
    pairs, only_base, only_cand = match_specs(base, other)
    assert pairs == [] and len(only_base) == len(only_cand) == 1
    assert spec_differences(base, other) == ["threads: 4 vs 8"]


def test_only_successful_records_are_compared() -> None:
    failed = make_record("c1", [s * 2 for s in steady_steps()])
    failed["status"] = "failed"
    comparison = compare_records([make_record("b1", steady_steps())], [failed], 5.0)
    assert comparison.rows == [] and comparison.regressions == []


# --- statistics --------------------------------------------------------------------------------

def test_mann_whitney_identical_samples_give_p_one() -> None:
    samples = steady_steps(n=20)
    assert mann_whitney_p(samples, samples) == pytest.approx(1.0, abs=0.02)
    assert mann_whitney_p([3.0] * 5, [3.0] * 7) == 1.0


def test_mann_whitney_separated_samples_give_tiny_p() -> None:
    low, high = np.arange(50.0), np.arange(100.0, 150.0)
    assert mann_whitney_p(low, high) < 1e-15
    assert mann_whitney_p(low, high) == mann_whitney_p(high, low)


def test_mann_whitney_is_exact_for_small_samples_without_ties() -> None:
    # 5 against 5, fully separated: 2 of the C(10, 5) = 252 rankings are as extreme.
    assert mann_whitney_p([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) == pytest.approx(2 / 252)
    # 3 against 3 can never reach p < 0.05 (the run-level test relies on that).
    assert mann_whitney_p([1, 2, 3], [4, 5, 6]) == pytest.approx(0.1)


def test_mann_whitney_matches_the_normal_approximation_by_hand() -> None:
    # Ties shrink the variance: 9/12 * (7 - 18/30) = 4.8; z = 3.5 / sqrt(4.8) -> p = 0.11015.
    assert mann_whitney_p([1, 1, 2], [2, 3, 3]) == pytest.approx(0.110149, abs=1e-5)
    # 9 against 9: U = 0, mean 40.5, sd sqrt(81 * 19 / 12); z = 40 / sd (continuity corrected).
    z = 40 / math.sqrt(81 * 19 / 12)
    assert mann_whitney_p(range(9), range(10, 19)) == pytest.approx(math.erfc(z / math.sqrt(2)))


def test_bootstrap_ci_takes_one_sample_and_zero_medians() -> None:
    assert bootstrap_ratio_ci([1.0], [2.0, 3.0]) == (2.0, 3.0)
    low, high = bootstrap_ratio_ci([0.0, 0.0, 1.0], [2.0, 3.0])
    assert (low, high) == (2.0, 3.0)
    assert all(math.isnan(v) for v in bootstrap_ratio_ci([0.0, 0.0], [2.0, 3.0]))


def test_significance_needs_both_the_ci_and_the_rank_test() -> None:
    def made(ci: tuple[float, float], p_value: float) -> RatioTest:
        return RatioTest(10, 10, 1.0, 0.9, 0.9, ci[0], ci[1], p_value)

    assert made((0.85, 0.95), 0.01).significant(higher_is_better=True, worse=True)
    assert not made((0.85, 1.01), 0.01).significant(higher_is_better=True, worse=True)
    assert not made((0.85, 0.95), 0.2).significant(higher_is_better=True, worse=True)
    assert not made((0.85, 0.95), 0.01).significant(higher_is_better=False, worse=True)
    assert made((1.05, 1.2), 0.01).significant(higher_is_better=False, worse=True)
    assert made((1.05, 1.2), 0.01).significant(higher_is_better=True, worse=False)


def test_bootstrap_ci_is_reproducible_and_brackets_the_ratio() -> None:
    base, cand = steady_steps(seed=1), steady_steps(seed=2, mean=0.012)
    first = bootstrap_ratio_ci(base, cand)
    assert first == bootstrap_ratio_ci(base, cand)
    test = RatioTest.of(base, cand)
    assert test.ci_low < test.ratio < test.ci_high
    assert test.ratio == pytest.approx(1.2, rel=0.03)
    same = RatioTest.of(base, base)
    assert same.ratio == 1.0 and same.ci_low <= 1.0 <= same.ci_high


def _runs(tmp_path: Path, side: str, levels: list[float]) -> str:
    """One record per run; each run's steps are tight around its own level (machine state)."""
    for index, level in enumerate(levels):
        write(tmp_path / side / f"{side}-{index}.json",
              make_record(f"{side}-{index}", steady_steps(seed=index, mean=0.010 * level,
                                                          noise=0.00005)))
    return str(tmp_path / side)


def test_run_to_run_noise_with_repeats_is_not_a_regression(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Five runs each of the same code on a machine whose runs differ by up to 25%: every run
    # is tight inside, so one run against another looks "significant" step by step.
    base = _runs(tmp_path, "base", [1.00, 1.22, 0.97, 1.10, 1.25])
    cand = _runs(tmp_path, "cand", [1.20, 1.02, 1.24, 0.99, 1.12])
    single_base = str(tmp_path / "base" / "base-0.json")
    single_cand = str(tmp_path / "cand" / "cand-0.json")
    assert main(["compare", single_base, single_cand]) == 1
    assert "where a side has one run" in capsys.readouterr().out
    assert main(["compare", base, cand]) == 0
    out = capsys.readouterr().out
    assert "5/5 in every row" in out
    assert verdict_line(out) == "no significant change in 2 gated metrics"


def test_a_real_slowdown_across_repeats_is_a_regression(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = _runs(tmp_path, "base", [1.00, 1.03, 0.98, 1.01, 1.02])
    cand = _runs(tmp_path, "cand", [1.30, 1.33, 1.28, 1.31, 1.35])
    assert main(["compare", base, cand]) == 1
    out = capsys.readouterr().out
    assert verdict_line(out).startswith("regression: hep_cnn throughput -")
    assert "; hep_cnn step time +" in verdict_line(out) and "5/5 in every row" in out


# --- a gate that cannot pass silently ----------------------------------------------------------

def saved_summary_file(path: Path, mean: float, stddev: float, rounds: int) -> str:
    """A `--benchmark-save` file: summary statistics only, no per-round data."""
    return write(path, {
        "machine_info": {"node": "bench01", "processor": "x86_64", "cpu": {"brand_raw": "Xeon"}},
        "commit_info": {}, "datetime": "2024-01-02T03:04:05+00:00", "version": "4.0.0",
        "benchmarks": [{"name": "test_sum", "fullname": "bench.py::test_sum",
                        "stats": {"min": mean - stddev, "max": mean + 3 * stddev,
                                  "mean": mean, "stddev": stddev, "median": mean,
                                  "rounds": rounds, "iterations": 1},
                        "extra_info": {}}]})


def test_summary_only_files_catch_a_3x_slowdown(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    base = saved_summary_file(tmp_path / "0001_base.json", 20e-6, 2e-6, 40_000)
    slow = saved_summary_file(tmp_path / "0002_slow.json", 60e-6, 6e-6, 40_000)
    same = saved_summary_file(tmp_path / "0003_same.json", 20.1e-6, 2.1e-6, 40_000)
    assert main(["compare", base, slow]) == 1
    out = capsys.readouterr().out
    assert verdict_line(out).startswith("regression: test_sum step time 3x [")
    assert "summary" in out
    assert main(["compare", base, same]) == 0


def test_no_spec_in_common_exits_nothing_compared_naming_the_fields(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    steps = steady_steps()
    base = write(tmp_path / "a" / "r.json", make_record("base-1", steps, steps=20,
                                                        spec_key="aaaa000000000000"))
    cand = write(tmp_path / "b" / "r.json", make_record("cand-1", steps, steps=30,
                                                        spec_key="bbbb000000000000"))
    assert main(["compare", str(Path(base).parent), str(Path(cand).parent)]) == 3
    err = capsys.readouterr().err
    assert "nothing compared" in err and "steps: 20 vs 30" in err


def test_only_unsampled_rows_exit_nothing_compared(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    base, cand = make_record("base-1", steady_steps()), make_record("cand-1", steady_steps())
    for record in (base, cand):
        for entry in record["metrics"]:
            entry.pop("samples", None)
            entry.pop("stats", None)
    assert main(["compare", write(tmp_path / "a.json", base),
                 write(tmp_path / "b.json", cand)]) == 3
    assert "lacks samples" in capsys.readouterr().err


def test_match_on_compares_across_an_intended_difference(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    steps = steady_steps()
    one = write(tmp_path / "a.json", make_record("base-1", steps, threads=1,
                                                 spec_key="aaaa000000000000"))
    two = write(tmp_path / "b.json", make_record("cand-1", [s / 2 for s in steps], threads=2,
                                                 spec_key="bbbb000000000000"))
    assert main(["compare", one, two]) == 3
    capsys.readouterr()
    assert main(["compare", one, two, "--match-on", "workload,size,precision"]) == 0
    assert "improved" in capsys.readouterr().out


def test_same_machine_id_different_cpu_warns_of_a_hardware_comparison(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    steps = steady_steps()
    amd = make_record("base-1", steps)
    amd["machine"]["cpu_model"] = "AMD EPYC"
    xeon = make_record("cand-1", [s * 3.18 for s in steps])
    xeon["machine"].update(cpu_vendor="GenuineIntel", cpu_family=6, cpu_model_number=143,
                           cpu_model="Intel(R) Xeon(R) Processor")
    assert amd["machine"]["machine_id"] == xeon["machine"]["machine_id"]
    a, b = write(tmp_path / "a.json", amd), write(tmp_path / "b.json", xeon)
    assert main(["compare", a, b]) == 2  # refused: a gate does not compare machines
    refused = capsys.readouterr().err
    assert "different hardware" in refused and "--allow-different-hardware" in refused
    assert "cpu_family: 25 vs 6" in refused or "cpu_model: AMD EPYC vs" in refused
    assert main(["compare", a, b, "--allow-different-hardware"]) == 1
    captured = capsys.readouterr()
    assert "different hardware: this is a hardware comparison" in captured.err
    assert "cpu_model: AMD EPYC vs Intel(R) Xeon(R) Processor" in captured.err
    assert "different hardware: this is a hardware comparison" in captured.out


def test_holm_keeps_many_marginal_p_values_from_failing_the_gate() -> None:
    """Twenty metrics each at p = 0.03 would be twenty regressions one by one; corrected for
    the twenty tests none survives, while one strong effect among them does."""
    from harness.compare.rows import REGRESSION, ComparisonRow, holm

    def row(p_value: float) -> ComparisonRow:
        test = RatioTest(12, 12, 1.0, 0.9, 0.9, 0.85, 0.95, p_value, "samples")
        return ComparisonRow("w", "s", "throughput", "samples/s", True, REGRESSION,
                             test=test)

    marginal = holm([row(0.03) for _ in range(20)])
    assert all(r.verdict == "ok" for r in marginal)
    mixed = holm([row(0.03) for _ in range(19)] + [row(1e-6)])
    assert [r.verdict for r in mixed].count(REGRESSION) == 1


def _machine_folder(top: Path, family: int, versions: dict[str, float]) -> Path:
    """A machine's folder as a store lays it out (<commit>/<run>.json): two workloads at each
    commit, step times scaled by the commit's factor."""
    folder = top / f"cpu-{family}"
    for commit, factor in versions.items():
        for workload in ("hep_cnn", "lstm"):
            record = make_record(f"{family}-{commit[:4]}-{workload}",
                                 [s * factor for s in steady_steps()], workload=workload,
                                 spec_key=f"{workload:x<16}"[:16])
            record["machine"]["cpu_family"] = family
            record["code"]["commit"] = commit
            record["created_at"] = f"2026-11-0{len(commit) % 9 + 1}T00:00:00Z"
            write(folder / commit[:12] / f"{record['run_id']}.json", record)
    return folder


def test_two_machine_folders_compare_their_latest_commits_warning_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`compare results/zen-1 results/zen-4`: a machine's folder is read as it is laid out,
    its latest commit compared (an older, slower one left out), each warning said once
    however many experiments share it."""
    older, newer = "a" * 40, "b" * 41  # created a day apart (by length, above)
    base = _machine_folder(tmp_path, 23, {older: 3.0, newer: 1.0})
    cand = _machine_folder(tmp_path, 25, {newer: 1.0})
    assert main(["compare", str(base), str(cand)]) == 2  # different hardware, refused
    capsys.readouterr()
    assert main(["compare", str(base), str(cand), "--allow-different-hardware"]) == 0
    captured = capsys.readouterr()
    assert captured.err.count("different hardware") == 1
    assert "cpu_family: 23 vs 25" in captured.err and "(2 spec(s):" in captured.err
    assert captured.err.count("older record(s)") == 1
    assert captured.out.count("different hardware") == 1
    step = [line for line in captured.out.splitlines() if " step time " in line]
    assert len(step) == 2 and all("1/1 steps" not in line and " ok" in line for line in step)
