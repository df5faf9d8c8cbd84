"""Records that name the code that ran: the tree hash of the files (a record field), the refusal
of a tree with changes or untracked files, the check of new records against the commit, and
results/add-machine.sh refusing a dirty tree before it runs anything."""
from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from harness.machine import clean_tree
from harness.machine.fingerprint import harness_info, working_tree_hash

ROOT = Path(__file__).resolve().parents[3]


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    git(root, "config", "user.email", "t@example.org")
    git(root, "config", "user.name", "t")
    (root / "a.py").write_text("x = 1\n")
    (root / ".gitignore").write_text("ignored/\n")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "first")
    return root


def test_the_tree_hash_is_the_commits_exactly_when_the_files_are(repo: Path) -> None:
    head = git(repo, "rev-parse", "HEAD^{tree}")
    assert working_tree_hash(repo) == head and clean_tree.tree_problem(repo) is None
    (repo / "ignored").mkdir()
    (repo / "ignored" / "cache.bin").write_text("not code")
    assert working_tree_hash(repo) == head  # ignored files are not the code
    index = (repo / ".git" / "index").read_bytes()
    (repo / "new.py").write_text("y = 2\n")
    untracked = working_tree_hash(repo)
    assert untracked not in (None, head)
    assert "new.py" in clean_tree.tree_problem(repo)
    # hashed in a scratch index and object store: the checkout's own are left alone
    assert (repo / ".git" / "index").read_bytes() == index
    assert git(repo, "status", "--porcelain") == "?? new.py"
    (repo / "new.py").unlink()
    (repo / "a.py").write_text("x = 2\n")
    assert working_tree_hash(repo) not in (head, untracked)
    assert "a.py" in clean_tree.tree_problem(repo)


def test_a_record_names_the_tree_that_ran() -> None:
    """On this checkout (clean or not): the field is a tree hash, the commit's when the files
    are the commit's, and the schema takes it."""
    from harness.records.record import check_record

    info = harness_info()
    assert re.fullmatch("[0-9a-f]{40}", info["git_tree"] or "")
    if not info["dirty"] and not git(ROOT, "status", "--porcelain"):
        assert info["git_tree"] == git(ROOT, "rev-parse", "HEAD^{tree}")
    golden = json.loads((ROOT / "tests/harness/golden/record_v1.json").read_text())
    check_record({**golden, "harness": info})
    with pytest.raises(Exception, match="git_tree"):
        check_record({**golden, "harness": {**info, "git_tree": "not a hash"}})


def test_new_records_must_name_the_commit_and_its_tree(tmp_path: Path) -> None:
    good, stale = tmp_path / "good.json", tmp_path / "stale.json"
    good.write_text(json.dumps({"harness": {"git_commit": "c1", "git_tree": "t1",
                                            "dirty": False}}))
    stale.write_text(json.dumps({"harness": {"git_commit": "c0", "git_tree": "t0",
                                             "dirty": True}}))
    assert clean_tree.record_problems([str(good)], "c1", "t1") == []
    (problem,) = clean_tree.record_problems([str(good), str(stale)], "c1", "t1")
    assert problem.startswith(str(stale)) and "dirty True" in problem


def _script_in(repo: Path, tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    (repo / "results").mkdir()
    script = repo / "results" / "add-machine.sh"
    shutil.copy(ROOT / "results" / "add-machine.sh", script)
    log = tmp_path / "dtbench.log"
    stub = tmp_path / "dtbench"
    stub.write_text(f"#!/bin/sh\necho \"$@\" >> {log}\n")
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    env = {**os.environ, "DTBENCH": str(stub), "PYTHON": sys.executable,
           "PYTHONPATH": str(ROOT), "PATH": os.environ["PATH"]}
    return script, log, env


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_add_machine_refuses_a_dirty_tree_before_running_anything(repo: Path,
                                                                  tmp_path: Path) -> None:
    script, log, env = _script_in(repo, tmp_path)
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 2 and "changed or untracked" in done.stderr
    assert not log.exists()  # nothing ran
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "the script")
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "run standard --out results -q" in log.read_text()
