"""Where records go without --out, and where the reading commands look without a path: the
user's own store ($DTBENCH_STORE, else ./.dtbench), never a checkout's published results/
(issue 51 item 1)."""
from __future__ import annotations

import argparse
import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.commands.cli import build_parser, main
from harness.store.targets import STORE_DIR, STORE_VAR, default_store
from tests.harness.report.report_records import training, write_store

RunCli = Callable[..., subprocess.CompletedProcess[str]]


def test_the_default_store_is_dtbench_store_else_dot_dtbench(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(STORE_VAR, raising=False)
    assert default_store() == STORE_DIR == ".dtbench"
    monkeypatch.setenv(STORE_VAR, "/srv/bench")
    assert default_store() == "/srv/bench"


@pytest.mark.parametrize("words, dest", [
    (["run"], "out"), (["comm"], "out"), (["kernels"], "out"), (["doctor"], "out"),
    (["sbatch"], "out"), (["store", "export", "postgresql://u@h/d"], "out"),
    (["report"], "paths"), (["history"], "paths"), (["publish", "-o", "site"], "paths"),
], ids=lambda value: " ".join(value) if isinstance(value, list) else value)
def test_every_command_writes_and_reads_the_users_store(
        words: list[str], dest: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(STORE_VAR, "/srv/bench")
    found = getattr(build_parser(words[0]).parse_args(words), dest)
    assert found == (["/srv/bench"] if dest == "paths" else "/srv/bench")


def test_no_option_defaults_to_the_published_results() -> None:
    parser = build_parser()
    defaults = [(prog, action.dest) for prog, sub in _parsers(parser)
                for action in sub._actions if action.default in ("results", ["results"])]
    assert defaults == []


def _parsers(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    """Every subcommand's parser, nested ones too."""
    found: list[tuple[str, argparse.ArgumentParser]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += [(sub.prog, sub), *_parsers(sub)]
    return found


@pytest.mark.parametrize("words", [["report"], ["history"], ["publish", "-o", "site"]],
                         ids=["report", "history", "publish"])
def test_no_path_and_no_store_yet_says_where_run_writes(
        words: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(words) == 2
    err = capsys.readouterr().err
    assert err == (f"dtbench {words[0]}: error: no records in .dtbench, the store dtbench run "
                   "writes ($DTBENCH_STORE names another): run dtbench run, or give a PATH\n")
    assert list(tmp_path.iterdir()) == []


def test_report_and_history_with_no_path_read_the_default_store(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    write_store(tmp_path / ".dtbench", [training("r-mine")])
    assert main(["report", "--format", "csv"]) == 0
    assert "r-mine" in capsys.readouterr().out
    assert main(["history", "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["points"][0]["values"]


def test_a_run_in_a_checkout_leaves_results_alone_and_report_reads_it(
        tmp_path: Path, run_cli: RunCli) -> None:
    """The acceptance of issue 51 item 1: in a git checkout with a published results/, `dtbench
    run` of a tiny workload changes nothing there, and `dtbench report` with no path reports
    the run."""
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    published = tmp_path / "results" / "box" / "abc1234"
    published.mkdir(parents=True)
    record = json.dumps(training("r-published"))
    (published / "20240102T030405Z-hep_cnn-0.json").write_text(record)

    def snapshot() -> dict[str, bytes]:
        return {str(p.relative_to(tmp_path)): p.read_bytes()
                for p in sorted((tmp_path / "results").rglob("*")) if p.is_file()}

    before = snapshot()
    ran = run_cli("run", "-w", "hep_cnn", "--size", "tiny", "--steps", "3", "--warmup", "1",
                  "--threads", "1", "-q")
    assert ran.returncode == 0, ran.stderr
    assert snapshot() == before
    (made,) = (tmp_path / STORE_DIR).rglob("*.json")
    run_id = json.loads(made.read_text())["run_id"]
    assert f"records: {STORE_DIR}" in ran.stderr
    reported = run_cli("report", "--format", "csv")
    assert reported.returncode == 0, reported.stderr
    assert run_id in reported.stdout and "r-published" not in reported.stdout
