"""The shipped CI examples (.github/workflows/benchmark.yml and docs/ci/gitlab-ci.yml) run
commands that exist: every dtbench command in them parses; and `dtbench gate`, the command they
run, works both ways in a throw-away repository holding dtbench's code: with no history it
runs the merge base from a git worktree and says so, after `dtbench gate record` it gates on
the history; its Markdown summary's verdict agrees with the exit code, names the baseline it
used and what a pass means. (Both sides run the same code here, so the gate normally passes;
whether it does is the false-alarm rate, a measurement, not something a test may assert.)"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.commands.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
GITHUB = ROOT / ".github" / "workflows" / "benchmark.yml"
GITLAB = ROOT / "docs" / "ci" / "gitlab-ci.yml"
TINY_ARGS = "-w hep_cnn --size tiny --steps 3 --warmup 1 --threads 1 --repeat 2"


def _scripts() -> dict[str, list[str]]:
    github = yaml.safe_load(GITHUB.read_text())
    gitlab = yaml.safe_load(GITLAB.read_text())
    return {"github": [step["run"] for job in github["jobs"].values() for step in job["steps"]
                       if "run" in step],
            "gitlab": [line for job in gitlab.values() if isinstance(job, dict)
                       for key in ("before_script", "script") for line in job.get(key, [])]}


def _dtbench_commands(script: str) -> list[str]:
    return [match.group(0).split(" >")[0].split(" |")[0].split(" ||")[0]
            for match in re.finditer(r"(?<![\w$/.-])dtbench [^\n;&)]+", script)]


@pytest.mark.parametrize("system", ["github", "gitlab"])
def test_every_dtbench_command_of_the_examples_parses(system: str) -> None:
    scripts = _scripts()[system]
    commands = [c for script in scripts for c in _dtbench_commands(script)]
    assert any(c.startswith("dtbench gate record") for c in commands)
    assert any(c.startswith("dtbench gate --") for c in commands)
    assert {shlex.split(c)[1] for c in commands} == {"gate", "publish"}
    env = {"DTBENCH_ARGS": "quick --size tiny", "TARGET_BRANCH": "main"}
    parser = build_parser()
    for command in commands:
        expanded = re.sub(r"\$\{?(\w+)\}?", lambda m: shlex.quote(env.get(m.group(1),
                                                                          m.group(0))),
                          command.replace('"', ""))
        with _no_exit():
            args = parser.parse_args(shlex.split(expanded)[1:])
        if args.command == "gate":  # what the gate runs parses as `dtbench run`'s arguments
            with _no_exit():
                parser.parse_args(["run", *shlex.split(args.run)])


def test_the_examples_install_torchs_cpu_build_first() -> None:
    """A hosted runner resolving pyproject's torch range alone pulls the CUDA build (GBs)."""
    for system, scripts in _scripts().items():
        text = "\n".join(scripts) + GITLAB.read_text()
        assert "download.pytorch.org/whl/cpu" in text, system


class _no_exit:
    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, value: object, tb: object) -> bool:
        if isinstance(value, SystemExit):
            raise AssertionError(f"the command does not parse: exit {value.code}")
        return False


def _gate(cwd: Path, *args: str) -> tuple[int, str, str]:
    """`dtbench gate ARGS` in `cwd` as CI runs it: exit code, summary.md, the step summary."""
    step = cwd.parent / "step-summary.md"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GITHUB_STEP_SUMMARY": str(step)}
    for name in ("GITHUB_HEAD_REF", "GITHUB_REF_NAME", "CI_COMMIT_REF_NAME"):
        env.pop(name, None)  # the branch comes from the repository's checkout
    done = subprocess.run([sys.executable, "-m", "harness", "gate", *args, "--run", TINY_ARGS],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    summary = cwd / "summary.md"
    if args[:1] == ("record",):
        return done.returncode, done.stderr[-2000:], ""
    assert summary.exists(), done.stderr[-2000:]
    return done.returncode, summary.read_text(), step.read_text() if step.exists() else ""


def _repository(path: Path) -> str:
    """A git repository on main holding dtbench's code (the merge base a worktree runs), with
    a branch `change` one commit ahead; main's commit."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-c", "user.email=ci@example.org", "-c", "user.name=ci",
                               *args], cwd=path, check=True, capture_output=True,
                              text=True).stdout.strip()

    path.mkdir()
    for package in ("harness", "backends", "workloads"):
        shutil.copytree(ROOT / package, path / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (path / ".gitignore").write_text("history/\ncandidate/\nbaseline/\nsummary.md\n")
    git("init", "-q", "-b", "main")
    git("add", "-A")
    git("commit", "-q", "-m", "base")
    main = git("rev-parse", "HEAD")
    git("checkout", "-q", "-b", "change")
    git("commit", "-q", "--allow-empty", "-m", "the change")
    return main


def _verdict_agrees(status: int, summary: str) -> None:
    lines = summary.splitlines()
    assert lines[0] == "### dtbench gate " + ("✅" if status == 0 else "❌"), summary
    assert lines[2].startswith(("no significant change", "no regression")) == (status == 0)
    assert "What a pass means: the smallest throughput slowdown" in summary


def test_the_gate_falls_back_to_the_merge_base_then_gates_on_the_history(
        tmp_path: Path) -> None:
    """With no history the gate runs the merge base's code from a git worktree (its records
    carry main's commit) and says so; after two recorded runs of main it gates against that
    history and says so. Each summary's verdict agrees with the exit code, and reaches the
    job's step summary."""
    repo = tmp_path / "repo"
    main = _repository(repo)
    status, summary, step = _gate(repo)
    assert status in (0, 1), summary
    _verdict_agrees(status, summary)
    assert f"Baseline: the merge base {main[:12]} run now on this runner (no history store)" \
        in summary
    records = [json.loads(path.read_text()) for path in (repo / "baseline").rglob("*.json")]
    assert {record["code"]["commit"] for record in records
            if isinstance(record, dict) and "code" in record} == {main}
    assert step == summary
    for name in ("candidate", "baseline"):
        shutil.rmtree(repo / name)
    subprocess.run(["git", "checkout", "-q", "main"], cwd=repo, check=True)
    for _ in range(2):
        assert _gate(repo, "record")[0] == 0
    subprocess.run(["git", "checkout", "-q", "change"], cwd=repo, check=True)
    shutil.rmtree(repo / "candidate", ignore_errors=True)
    status, summary, _ = _gate(repo)
    assert status in (0, 1), summary
    _verdict_agrees(status, summary)
    assert "Baseline: the history of main on this runner (history)" in summary
    assert not (repo / "baseline").exists()
