"""The shipped CI examples (.github/workflows/benchmark.yml, docs/ci/gitlab-ci.yml) run
commands that exist: every dtbench command in them parses, and the GitHub workflow's run,
run and compare steps, executed as written (with a tiny DTBENCH_ARGS and without the git
worktree of the merge base), leave a Markdown summary whose verdict agrees with the exit
code. (Both sides run the same code here, so the gate normally passes; whether it does is
the false-alarm rate, a measurement, not something a test may assert.)"""
from __future__ import annotations

import os
import re
import shlex
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
    return {"github": [step["run"] for step in github["jobs"]["gate"]["steps"] if "run" in step],
            "gitlab": list(gitlab["benchmark"]["script"])}


def _dtbench_commands(script: str) -> list[str]:
    return [match.group(0).split(" >")[0].split(" |")[0].split(" ||")[0]
            for match in re.finditer(r"dtbench [^\n;&)]+", script)]


@pytest.mark.parametrize("system", ["github", "gitlab"])
def test_every_dtbench_command_of_the_examples_parses(system: str) -> None:
    commands = [c for script in _scripts()[system] for c in _dtbench_commands(script)]
    assert {shlex.split(c)[1] for c in commands} == {"run", "compare"}
    env = {"DTBENCH_ARGS": os.environ.get("DTBENCH_ARGS", "quick --size tiny"),
           "RUNNER_NAME": "r", "CI_RUNNER_DESCRIPTION": "r", "base": "abc",
           "GITHUB_WORKSPACE": "/w", "CI_PROJECT_DIR": "/w"}
    parser = build_parser()
    for command in commands:
        expanded = re.sub(r"\$\{?(\w+)\}?", lambda m: env.get(m.group(1), m.group(0)), command)
        with _no_exit():
            parser.parse_args(shlex.split(expanded)[1:])


class _no_exit:
    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, value: object, tb: object) -> bool:
        if isinstance(value, SystemExit):
            raise AssertionError(f"the command does not parse: exit {value.code}")
        return False


def test_the_github_workflow_steps_gate_as_written(tmp_path: Path) -> None:
    scripts = _scripts()["github"]
    baseline_step = next(s for s in scripts if "merge-base" in s)
    inner = next(c for c in _dtbench_commands(baseline_step))
    steps = [inner, *(c for s in scripts if "merge-base" not in s
                      for c in _dtbench_commands(s))]
    summary = tmp_path / "summary.md"
    env = {**os.environ, "DTBENCH_ARGS": TINY_ARGS, "RUNNER_NAME": "ci-runner",
           "base": "0" * 40, "GITHUB_WORKSPACE": str(tmp_path)}
    for command in steps:
        expanded = re.sub(r"\$\{?(\w+)\}?", lambda m: env.get(m.group(1), m.group(0)), command)
        argv = [sys.executable, "-m", "harness", *shlex.split(expanded)[1:]]
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=600)
        if "compare" in argv:
            summary.write_text(done.stdout)
            gate = done.returncode
            assert gate in (0, 1), (expanded, done.stderr[-2000:])
        else:
            assert done.returncode == 0, (expanded, done.stderr[-2000:])
    text = summary.read_text()
    assert text.startswith("### dtbench compare " + ("✅" if gate == 0 else "❌"))
    verdict = text.splitlines()[2]
    assert (verdict.startswith("no significant regression")) == (gate == 0)
    assert "metric(s) compared" in text
