"""The clock a comparison reads its steps on (harness/compare/clock.py): records restated
from cpu_time or from the speed probe, step by step; compare and the gate with --clock.
Counted, nothing timed."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from harness.commands.cli import main
from harness.compare import gate as gate_module
from harness.compare.clock import on_clock, restated
from harness.compare.command import judge
from harness.compare.gate import gate, record
from harness.core.errors import UsageError
from harness.records.record import Metric
from harness.records.record import metric as find_metric
from tests.harness.compare.test_compare import make_record, steady_steps, write
from tests.harness.compare.test_gate import Runs, git, options, repo  # noqa: F401


def probed(run_id: str, machine: float, code: float = 1.0, seed: int = 0) -> dict[str, Any]:
    """A record of a machine running at 1/`machine` of its speed (its steps and the probe
    after each slower alike) of code `code` times slower (its steps only)."""
    steps = [s * machine * code for s in steady_steps(seed=seed, noise=0.00002)]
    probes = [0.002 * machine * (1 + 0.001 * (i % 3)) for i in range(len(steps))]
    cpu = [2 * s for s in steps]
    return make_record(run_id, steps, extra_metrics=[
        Metric("reference_time", "s", 0.002 * machine, False, samples=probes),
        Metric("cpu_time", "s", 2 * steps[0], False, samples=cpu),
        Metric("tokens_per_s", "tokens/s", 1.0, True)])


def test_the_probe_clock_divides_each_step_by_the_probe_after_it() -> None:
    found = probed("r", 1.0)
    steps = find_metric(found, "step_time")["samples"]
    probes = find_metric(found, "reference_time")["samples"]
    on = restated(found, "probe")
    assert on is not None and on is not found
    step = find_metric(on, "step_time")
    assert step["samples"] == pytest.approx([s / p for s, p in zip(steps, probes, strict=True)])
    assert (step["unit"], step["clock"]) == ("probes", "probe")
    rate = find_metric(on, "throughput")
    batch = found["spec"]["global_batch"]
    assert rate["samples"] == pytest.approx([batch / s for s in step["samples"]])
    assert rate["unit"] == "samples/probe" and rate["stats"]["n"] == len(steps)
    assert find_metric(on, "tokens_per_s") is None  # a restatement of throughput: left out
    assert find_metric(found, "step_time")["unit"] == "s"  # the record itself unchanged
    assert restated(on, "probe") is on  # read on the probe's clock once, never twice


def test_the_cpu_clock_reads_cpu_time_and_the_wall_clock_changes_nothing() -> None:
    found = probed("r", 1.0)
    on = restated(found, "cpu")
    assert on is not None
    assert find_metric(on, "step_time")["samples"] == find_metric(found, "cpu_time")["samples"]
    assert restated(found, "wall") is found
    with pytest.raises(ValueError, match="unknown clock"):
        restated(found, "gpu")


def test_a_record_without_the_figure_is_left_out_a_failed_one_kept() -> None:
    plain = make_record("plain", steady_steps())
    assert restated(plain, "probe") is None
    failed = {**make_record("failed", steady_steps()), "status": "failed", "metrics": []}
    assert restated(failed, "probe") is failed
    kept, note = on_clock([probed("a", 1.0), plain, failed], "probe", "baseline")
    assert [r["run_id"] for r in kept] == ["a", "failed"]
    assert note is not None and "1 record(s) of the baseline lack the reference_time" in note
    with pytest.raises(UsageError, match="no record of the candidate has the reference_time"):
        on_clock([plain], "probe", "candidate")


def test_on_the_probe_clock_a_slower_machine_is_no_regression_slower_code_is() -> None:
    """The candidate's machine 20% slower (steps and probe alike): a regression on the wall
    clock, none on the probe's; its code 10% slower (steps only): a regression on both."""
    base = [probed(f"b{i}", 1.0, seed=i) for i in range(3)]
    slow_machine = [probed(f"m{i}", 1.2, seed=i + 3) for i in range(3)]
    slow_code = [probed(f"c{i}", 1.0, code=1.1, seed=i + 6) for i in range(3)]
    assert judge(base, slow_machine, 5.0).exit_code == 1
    assert judge(base, slow_machine, 5.0, clock="probe").exit_code == 0
    assert judge(base, slow_code, 5.0, clock="probe").exit_code == 1
    assert judge(base, slow_code, 5.0).exit_code == 1


def test_compare_takes_the_clock_from_the_command_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = [write(tmp_path / "a" / f"{i}.json", probed(f"b{i}", 1.0, seed=i)) for i in range(3)]
    cand = [write(tmp_path / "b" / f"{i}.json", probed(f"m{i}", 1.2, seed=i + 3))
            for i in range(3)]
    assert base and cand
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 1
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--clock", "probe"]) == 0
    write(tmp_path / "c" / "0.json", make_record("plain", steady_steps()))
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "c"), "--clock", "probe"]) == 2
    assert "no record of the candidate has the reference_time metric" in capsys.readouterr().err


class ProbedRuns(Runs):
    """Runs whose records carry the probe: the history's machine `machine` times slower than
    the candidate's own (a slower hour of the same runner)."""

    def __init__(self, machine: dict[str, float]) -> None:
        super().__init__()
        self.machine = machine
        self.args: list[list[str]] = []

    def __call__(self, args: list[str], out: Path | str, code: Path | None = None) -> int:
        self.args.append(list(args))
        where = Path(code) if code else Path.cwd()
        commit = git(where, "rev-parse", "HEAD")
        branch = git(where, "branch", "--show-current")
        side = Path(out).name
        self.calls.append((side, None))
        for repeat in range(3):
            index = len(self.calls) * 10 + repeat
            found = probed(f"{side}-{index}", self.machine.get(side, 1.0), seed=index)
            found["code"] = {"commit": commit, "branch": branch or None, "dirty": False}
            found["created_at"] = f"2026-12-01T00:{len(self.calls):02d}:0{repeat}Z"
            write(Path(out) / f"{index}.json", found)
        return 0


def test_the_gate_on_the_probe_clock_runs_the_probe_and_reads_the_history_on_it(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    runs = ProbedRuns({"history": 0.8})  # the history ran in a 25% faster hour
    monkeypatch.setattr(gate_module, "dtbench_run", runs)
    git(repo, "checkout", "-q", "main")
    chosen = options(repo, clock="probe")
    assert record(chosen) == 0
    git(repo, "checkout", "-q", "change")
    assert gate(replace(options(repo), summary=repo / "wall.md")) == 1  # the wall clock
    assert gate(replace(chosen, candidate=repo / "again")) == 0
    assert all(args[-1] == "--speed-probe" for args in (runs.args[0], runs.args[2]))
    assert "--speed-probe" not in runs.args[1]
    summary = (repo / "summary.md").read_text()
    assert "Clock: probe (steps read as the wall time over the speed probe timed after each " \
        "step)." in summary
    assert "Baseline: the history of main on this runner" in summary
