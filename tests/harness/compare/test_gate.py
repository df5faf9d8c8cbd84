"""`dtbench gate` (harness/compare/gate.py) in a throw-away git repository, its benchmark runs
replaced by records written in place (tests/test_ci_examples.py runs the real ones): which
baseline it takes, in which order the sides run, what the summary says, the exit codes."""
from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from harness.compare import gate as gate_module
from harness.compare.gate import GateOptions, base_commit, gate, record
from harness.core.errors import UsageError
from tests.harness.compare.test_compare import make_record, steady_steps, write


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.email=ci@example.org", "-c", "user.name=ci",
                           *args], cwd=repo, check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """main with two commits, `change` branched after the first, one commit ahead."""
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "code.txt").write_text("base\n")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "base")
    git(path, "checkout", "-q", "-b", "change")
    git(path, "commit", "-q", "--allow-empty", "-m", "the change")
    git(path, "checkout", "-q", "main")
    git(path, "commit", "-q", "--allow-empty", "-m", "main moves on")
    git(path, "checkout", "-q", "change")
    monkeypatch.chdir(path)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    return path


class Runs:
    """dtbench_run's stand-in: each call writes three runs of hep_cnn into OUT at the commit
    the code runs (the worktree's, or the repository's), `factor` times slower for `slow`."""

    def __init__(self, slow: str = "", factor: float = 1.0) -> None:
        self.calls: list[tuple[str, str | None]] = []
        self.slow, self.factor = slow, factor

    def __call__(self, args: list[str], out: Path | str, code: Path | None = None) -> int:
        where = Path(code) if code else Path.cwd()
        commit, branch = git(where, "rev-parse", "HEAD"), git(where, "branch", "--show-current")
        side = Path(out).name
        self.calls.append((side, git(code, "rev-parse", "HEAD") if code else None))
        factor = self.factor if side == self.slow else 1.0
        for repeat in range(3):
            index = len(self.calls) * 10 + repeat
            record = make_record(f"{side}-{index}", [s * factor for s in steady_steps(
                seed=repeat, noise=0.00002)])
            record["code"] = {"commit": commit, "branch": branch or None, "dirty": False}
            record["created_at"] = f"2026-12-01T00:{len(self.calls):02d}:0{repeat}Z"
            write(Path(out) / f"{index}.json", record)
        return 0


def options(repo: Path, **changed: object) -> GateOptions:
    found = GateOptions(run="quick --repeat 3", target_branch="main", history="history",
                        summary=repo / "summary.md", candidate=repo / "candidate",
                        baseline=repo / "baseline", threshold=5.0)
    return replace(found, **changed)  # type: ignore[arg-type]


def test_without_a_history_the_merge_base_runs_from_a_worktree(
        repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    runs = Runs()
    monkeypatch.setattr(gate_module, "dtbench_run", runs)
    step = repo.parent / "step.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    assert gate(options(repo)) == 0
    merge_base = git(repo, "merge-base", "main", "HEAD")
    assert runs.calls == [("candidate", None), ("baseline", merge_base)]
    summary = (repo / "summary.md").read_text()
    assert summary.startswith("### dtbench gate ✅\n\nno significant change in 2 gated metrics")
    assert f"Baseline: the merge base {merge_base[:12]} run now on this runner (no history " \
        "store)." in summary
    assert step.read_text() == summary
    assert git(repo, "worktree", "list").count("\n") == 0  # the worktree is gone
    assert capsys.readouterr().out.startswith("no significant change in 2 gated metrics")


def test_interleaved_the_sides_alternate_and_base_target_takes_the_tip(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = Runs(slow="candidate", factor=1.3)
    monkeypatch.setattr(gate_module, "dtbench_run", runs)
    tip = git(repo, "rev-parse", "main")
    assert base_commit(options(repo, base="target"))[0] == tip
    assert gate(options(repo, interleave=3, base="target")) == 1
    assert runs.calls == [("baseline", tip), ("candidate", None)] * 3
    summary = (repo / "summary.md").read_text()
    assert summary.splitlines()[2].startswith("regression: hep\\_cnn ")
    assert f"Baseline: the tip of main {tip[:12]} run now on this runner interleaved with this " \
        "change (3 invocations each, alternating)." in summary
    assert "| hep\\_cnn | " in summary.split("What a pass means")[1]  # from the runs: 9 and 9
    assert "runs: 9 against 9" in summary


def test_against_the_history_of_the_target_branch(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = Runs()
    monkeypatch.setattr(gate_module, "dtbench_run", runs)
    git(repo, "checkout", "-q", "main")
    assert record(options(repo)) == 0
    git(repo, "checkout", "-q", "change")
    assert gate(options(repo)) == 0
    assert runs.calls == [("history", None), ("candidate", None)]
    summary = (repo / "summary.md").read_text()
    assert "Baseline: the history of main on this runner (history), the latest commits' " \
        "runs." in summary
    assert not (repo / "baseline").exists()


def test_a_history_without_this_branch_falls_back_saying_why(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = Runs()
    monkeypatch.setattr(gate_module, "dtbench_run", runs)
    assert record(options(repo)) == 0  # recorded on `change`, not main
    assert gate(options(repo)) == 0
    summary = (repo / "summary.md").read_text()
    assert "run now on this runner (history: no successful record of" in summary
    assert "on branch main (branches: change)" in summary


def test_the_gate_cannot_run_exit_2(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gate_module, "dtbench_run", lambda *args, **kwargs: 2)
    with pytest.raises(UsageError, match="candidate's benchmarks could not run"):
        gate(options(repo))
    with pytest.raises(UsageError, match="--summary .*does not exist"):  # before any run
        gate(options(repo, summary=repo / "missing" / "summary.md"))
    write(repo / "candidate" / "old.json", {})
    with pytest.raises(UsageError, match="exists and is not empty"):
        gate(options(repo))
    with pytest.raises(UsageError, match="no branch trunk"):
        base_commit(options(repo, target_branch="trunk"))


def test_repeat_and_max_time_reach_each_run() -> None:
    found = options(Path("."), run="quick --size tiny", repeat=9, max_time=4.0)
    assert found.run_args() == ["quick", "--size", "tiny", "--repeat", "9", "--max-time", "4"]


def test_the_gate_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.commands.cli import build_parser

    args = build_parser("gate").parse_args(["gate", "record", "--history", "h", "--run",
                                            "quick --size tiny"])
    assert (args.action, args.history, args.run, args.interleave) == (
        "record", "h", "quick --size tiny", 0)
    written: list[tuple[list[str], str]] = []
    monkeypatch.setattr(gate_module, "dtbench_run",
                        lambda run, out, code=None: written.append((run, str(out))) or 0)
    from harness.commands.gate import command

    assert command(args) == 0 and written == [(["quick", "--size", "tiny"], "h")]
    assert json.dumps(build_parser("gate").parse_args(["gate"]).summary.name) == '"summary.md"'
