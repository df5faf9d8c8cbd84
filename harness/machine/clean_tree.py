"""Records that name the code that ran: `python -m harness.machine.clean_tree` exits 2, saying
why, unless the checkout is a commit's files exactly (no modified, staged or untracked file,
and the files' tree hash is the commit's); with `--records COMMIT TREE` it reads record paths
on stdin and exits 1 unless each names that commit and tree, undirty (results/add-machine.sh
runs both)."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from harness.machine.fingerprint import working_tree_hash


def tree_problem(root: Path) -> str | None:
    """Why the files at `root` are not exactly HEAD's, or None."""
    try:
        changed = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                  "--untracked-files=normal"], capture_output=True, text=True,
                                 timeout=60, check=True).stdout.splitlines()
        want = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD^{tree}"],
                              capture_output=True, text=True, timeout=60,
                              check=True).stdout.strip()
    except (subprocess.SubprocessError, OSError) as exc:
        return f"not a git checkout with a commit ({exc})"
    if changed:
        shown = ", ".join(line[3:] for line in changed[:5]) + (" ..." if len(changed) > 5 else "")
        return (f"{len(changed)} changed or untracked file(s) ({shown}): commit or remove them; "
                "a record must name the commit that ran")
    have = working_tree_hash(root)
    if have != want:
        return f"the files' tree {have} is not HEAD's tree {want}"
    return None


def record_problems(paths: list[str], commit: str, tree: str) -> list[str]:
    """Each record among `paths` that does not name `commit` and its `tree`, clean."""
    problems = []
    for path in paths:
        harness = json.loads(Path(path).read_text()).get("harness") or {}
        if (harness.get("git_commit"), harness.get("git_tree"), harness.get("dirty")) \
                != (commit, tree, False):
            problems.append(f"{path}: commit {harness.get('git_commit')}, tree "
                            f"{harness.get('git_tree')}, dirty {harness.get('dirty')}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.machine.clean_tree",
                                     description=__doc__)
    parser.add_argument("--records", nargs=2, metavar=("COMMIT", "TREE"),
                        help="check the records whose paths are on stdin instead")
    args = parser.parse_args(argv)
    if args.records:
        problems = record_problems([line for line in sys.stdin.read().split() if line],
                                   *args.records)
        for problem in problems:
            print(f"clean_tree: record does not name the code that ran: {problem}",
                  file=sys.stderr)
        return 1 if problems else 0
    problem = tree_problem(Path.cwd())
    if problem:
        print(f"clean_tree: error: {problem}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
