"""The shipped CI examples (.github/workflows/benchmark.yml, docs/ci/gitlab-ci.yml, and the
.ci/gate script both run) run commands that exist: every dtbench command in them parses, and
the gate, executed as written (with a tiny DTBENCH_ARGS and the baseline run in place of the
merge base's worktree), leaves a Markdown summary whose verdict agrees with the exit code and
names the baseline it used. (Both sides run the same code here, so the gate normally passes;
whether it does is the false-alarm rate, a measurement, not something a test may assert.)"""
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
GATE = ROOT / ".ci" / "gate"
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


def _gate_commands() -> list[str]:
    """The dtbench commands .ci/gate runs, as `dtbench ...` with its variables left in."""
    text = re.sub(r"\\\n\s*", " ", GATE.read_text())  # continued lines joined
    return [line.strip().replace("$dtbench", "dtbench").split(" >")[0].split(" ||")[0]
            for line in text.splitlines() if line.strip().startswith("$dtbench ")]


@pytest.mark.parametrize("system", ["github", "gitlab"])
def test_every_dtbench_command_of_the_examples_parses(system: str) -> None:
    scripts = _scripts()[system]
    assert any(".ci/gate record" in s for s in scripts)
    assert any(s.strip().startswith(("status=0", ".ci/gate")) and ".ci/gate" in s
               and "record" not in s for s in scripts)
    commands = [c for script in scripts for c in _dtbench_commands(script)] + _gate_commands()
    assert {shlex.split(c)[1] for c in commands} == {"run", "compare", "publish"}
    env = {"args": "quick --size tiny", "history": "history", "target": "main",
           "base": "abc", "here": "/w", "DTBENCH_ARGS": "quick --size tiny"}
    parser = build_parser()
    for command in commands:
        expanded = re.sub(r"\$\{?(\w+)\}?", lambda m: env.get(m.group(1), m.group(0)),
                          command.replace('"', ""))
        with _no_exit():
            parser.parse_args(shlex.split(expanded)[1:])


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


def _gate(cwd: Path, *args: str) -> tuple[int, str]:
    env = {**os.environ, "DTBENCH_ARGS": TINY_ARGS, "DTBENCH": f"{sys.executable} -m harness",
           "GATE_BASELINE_HERE": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([str(GATE), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=900)
    summary = cwd / "summary.md"
    return done.returncode, (summary.read_text() if summary.exists() else done.stderr[-2000:])


def test_the_gate_falls_back_to_the_merge_base_then_gates_on_the_history(
        tmp_path: Path) -> None:
    """In a repository on main: with no history the gate runs the baseline itself and says
    so; after two recorded runs of main it gates against that history and says so. Both
    summaries' verdicts agree with the exit code."""
    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q", "-b", "main")
    git("-c", "user.email=ci@example.org", "-c", "user.name=ci", "commit", "-q",
        "--allow-empty", "-m", "base")
    status, summary = _gate(tmp_path)
    assert status in (0, 1), summary
    assert summary.startswith("### dtbench compare " + ("✅" if status == 0 else "❌"))
    assert "Baseline: the merge base" in summary and "no history store" in summary
    for _ in range(2):
        assert _gate(tmp_path, "record")[0] == 0
    for name in ("candidate", "summary.md"):
        path = tmp_path / name
        if path.is_dir():
            import shutil

            shutil.rmtree(path)
        else:
            path.unlink()
    status, summary = _gate(tmp_path)
    assert status in (0, 1), summary
    assert "Baseline: the history of main on this runner" in summary
    verdict = summary.splitlines()[2]
    assert verdict.startswith("no significant regression") == (status == 0)
