"""The README carries a newcomer through the four jobs (issue 51 item 5): its command list and
counts agree with the parser and the registries, and each of its four recipes runs as written
on tiny records.

"As written" means every line of a recipe's code block, in order, through a shell-like split;
the only change is that `dtbench run` and `dtbench gate` lines get the options that make their
runs tiny (TINY below), so that the recipe's commands, paths and options are what is tested,
not the speed of a small preset on two cores. The second machine of recipe 2 is this machine
with its records relabelled (a test cannot borrow a second CPU)."""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# One small workload, one precision, three measured steps: what the recipes' runs become.
TINY = ["-w", "hep_cnn", "--precision", "fp32", "--size", "tiny", "--steps", "3",
        "--warmup", "1"]


def section(title: str) -> str:
    text = README.read_text()
    start = text.index(f"## {title}\n")
    following = text.find("\n## ", start + 1)
    return text[start:following if following > 0 else len(text)]


def recipes() -> dict[int, list[str]]:
    """Recipe number -> the command lines of its code block."""
    found: dict[int, list[str]] = {}
    for number, body in re.findall(r"\*\*(\d)\. .*?```sh\n(.*?)```", section("Four recipes"),
                                   flags=re.S):
        found[int(number)] = [line.strip() for line in body.splitlines() if line.strip()]
    return found


def test_the_command_list_names_every_command_of_the_parser_once() -> None:
    from harness.commands.cli import SUBCOMMANDS

    block = section("Commands").split("```")[1]
    listed = [line.split()[1] for line in block.splitlines() if line.startswith("dtbench ")]
    assert sorted(listed) == sorted(SUBCOMMANDS) and len(listed) == len(set(listed))


def test_the_counts_and_durations_the_readme_states_are_the_registries() -> None:
    from harness.run.suites import load_suite
    from harness.strategies.base import STRATEGIES

    text = README.read_text()
    stated = re.search(r"(\d+) strategies, each on an existing PyTorch engine", text)
    assert stated and int(stated.group(1)) == len(STRATEGIES.names())
    quick = load_suite("quick").description
    duration = re.search(r"a few minutes on 2 CPU cores", quick)
    assert duration and duration.group(0) in section("Quick start")


def test_there_are_four_recipes_of_at_most_five_commands() -> None:
    found = recipes()
    assert sorted(found) == [1, 2, 3, 4]
    assert all(0 < len(lines) <= 5 and all(line.startswith("dtbench ") for line in lines)
               for lines in found.values())


def environment(store: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DTBENCH_STORE": str(store)}
    env.pop("GITHUB_STEP_SUMMARY", None)
    return env


def tiny(line: str) -> list[str]:
    """A recipe line as arguments, its runs made tiny."""
    args = shlex.split(line)[1:]
    if args[0] == "run":
        return [*args, *TINY, "-q"]
    if args[0] == "gate":
        return [*args, "--run", shlex.join(["quick", *TINY, "--repeat", "2"])]
    return args


def dtbench(line: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", *tiny(line)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def relabel(folder: Path, name: str) -> None:
    """Make a folder's records another machine's: another name and CPU model."""
    for path in folder.rglob("*.json"):
        record = json.loads(path.read_text())
        record["machine"].update(name=name, cpu_model=f"{name} CPU", machine_id="ab" * 8)
        path.write_text(json.dumps(record))


def test_the_four_recipes_run_as_written(tmp_path: Path) -> None:
    found = recipes()
    env = environment(tmp_path / "store")

    # 1. Run and read: the run lands in the store; report with no path reads it.
    work = tmp_path / "one"
    work.mkdir()
    outputs = [dtbench(line, work, env) for line in found[1]]
    assert [done.returncode for done in outputs] == [0] * len(outputs), outputs[-1].stderr
    assert "## Experiments" in outputs[1].stdout or "| workload" in outputs[1].stdout
    assert "hep\\_cnn" in outputs[1].stdout or "hep_cnn" in outputs[1].stdout
    assert (work / "report.html").read_text().lstrip().startswith("<!DOCTYPE html")
    assert not (work / "results").exists()

    # 2. Two machines side by side (the second folder relabelled as another machine).
    work = tmp_path / "two"
    work.mkdir()
    run_a, run_b, report, compare = found[2]
    for line in (run_a, run_b):
        done = dtbench(line, work, env)
        assert done.returncode == 0, done.stderr
    second = shlex.split(run_b)[shlex.split(run_b).index("--out") + 1]
    relabel(work / second, "machine-b")
    done = dtbench(report, work, env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()[:40]
    start = next(i for i, line in enumerate(lines) if line.startswith("| "))
    end = next(i for i in range(start, len(lines)) if not lines[i].startswith("| "))
    first_table = lines[start:end]
    assert first_table[0].startswith("| machine") and len(first_table) == 4  # rule, 2 rows
    assert any("×" in line for line in first_table[1:])
    done = dtbench(compare, work, env)
    assert done.returncode in (0, 1), done.stderr
    assert done.stdout.startswith(("regression: ", "no regression in ",
                                   "no significant change in "))
    assert max(len(line) for line in done.stdout.splitlines()) <= 120

    # 4. Publish the table, from recipe 2's folders.
    outputs = [dtbench(line, work, env) for line in found[4]]
    assert [done.returncode for done in outputs] == [0] * len(outputs), outputs[-1].stderr
    assert (work / "results.md").read_text().startswith("# dtbench report")
    assert (work / "site" / "index.html").is_file()


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.email=ci@example.org", "-c", "user.name=ci", *args],
                   cwd=repo, check=True, capture_output=True)


def test_the_ci_gate_recipe_records_a_history_then_gates_a_change(tmp_path: Path) -> None:
    """Recipe 3 in a throw-away repository: `gate record` on main, `gate` on a branch one
    commit ahead; the gate compares with the history (exit 0 or 1, never 2) and says so."""
    record, check = recipes()[3]
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "code.txt").write_text("base\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    env = environment(tmp_path / "store")
    done = dtbench(record, repo, env)
    assert done.returncode == 0, done.stderr
    git(repo, "checkout", "-q", "-b", "change")
    git(repo, "commit", "-q", "--allow-empty", "-m", "a change")
    done = dtbench(check, repo, env)
    assert done.returncode in (0, 1), done.stderr
    summary = (repo / "summary.md").read_text()
    assert "history" in summary.lower() and "main" in summary


@pytest.mark.parametrize("line", [line for lines in recipes().values() for line in lines])
def test_every_recipe_line_parses(line: str) -> None:
    """Each recipe line is a valid command line of today's parser (no process started)."""
    from harness.commands.cli import build_parser

    parser = build_parser(command=shlex.split(line)[1])
    parser.parse_args(shlex.split(line)[1:])
