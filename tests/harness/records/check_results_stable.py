"""What every record of a results folder reports, compares and validates as, printed so that two
commits can be diffed (issue 53's acceptance: identical before and after a change).

Not a test (pytest does not collect it) and not part of the package: it runs the `dtbench`
found on PYTHONPATH, so the same script measures any checkout.

    export PYTHONPATH=$PWD; python tests/harness/records/check_results_stable.py results > after.txt
    mkdir /tmp/base && git archive 1b3cb06 | tar -x -C /tmp/base
    PYTHONPATH=/tmp/base python tests/harness/records/check_results_stable.py results > before.txt
    diff before.txt after.txt

It prints `dtbench report` (Markdown, CSV, by machine; the HTML with its plots as a digest),
`dtbench compare` of two machines, of one machine's two commits and of the predictions with
themselves, `dtbench history`, and per record its schema verdict, experiment key, label,
compare label and compare group (groups numbered by first appearance, so the partition is
compared, not the spelling of a key). About a minute on 2 cores.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def dtbench(*args: str) -> str:
    """One command's exit code, stdout and stderr, as text."""
    done = subprocess.run([sys.executable, "-m", "harness", *args], capture_output=True,
                          text=True, env=os.environ.copy(), check=False, timeout=900)
    return f"exit {done.returncode}\n--- stdout\n{done.stdout}--- stderr\n{done.stderr}"


def digest(text: str) -> str:
    return f"{len(text)} characters, sha256 {hashlib.sha256(text.encode()).hexdigest()}"


def folders(results: Path) -> tuple[list[Path], list[Path]]:
    """The machine folders, and the commit folders of the machine with the most of them."""
    machines = sorted(p for p in results.iterdir() if p.is_dir() and any(p.glob("*/*.json")))
    commits = max(([sorted(q for q in m.iterdir() if q.is_dir()) for m in machines]),
                  key=len, default=[])
    return machines, commits


def commands(results: Path) -> list[tuple[str, list[str], bool]]:
    """(title, arguments, whether to print a digest instead of the text)."""
    root = str(results)
    machines, commits = folders(results)
    found = [("report md", ["report", root, "--format", "md"], False),
             ("report csv", ["report", root, "--format", "csv"], False),
             ("report by machine", ["report", root, "--by", "machine"], False),
             ("report html", ["report", root, "--format", "html"], True),
             ("history", ["history", root], False)]
    if len(machines) >= 2:
        found += [(f"compare {machines[0].name} {machines[-1].name}",
                   ["compare", str(machines[0]), str(machines[-1]),
                    "--allow-different-hardware"], False),
                  (f"compare {machines[0].name} {machines[-1].name} md",
                   ["compare", str(machines[0]), str(machines[-1]),
                    "--allow-different-hardware", "--format", "md"], False)]
    if len(commits) >= 2:
        found.append((f"compare {commits[0]} {commits[-1]}",
                      ["compare", str(commits[0]), str(commits[-1])], False))
    if (results / "predict").is_dir():
        found.append(("compare predict predict",
                      ["compare", str(results / "predict"), str(results / "predict")], False))
    return found


def per_record(results: Path) -> list[str]:
    """Each record file: its schema verdict, experiment key and labels, compare group."""
    from harness.compare.matching import fields_key, spec_label
    from harness.records.experiment import experiment_key, label
    from harness.records.schema import first_violation

    lines, groups = [], {}
    for path in sorted(results.rglob("*.json")):
        try:
            record: Any = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            lines.append(f"{path.relative_to(results)}: unreadable ({exc})")
            continue
        verdict = first_violation(record) or "valid"
        if verdict != "valid" or not isinstance(record, dict):
            lines.append(f"{path.relative_to(results)}: {verdict}")
            continue
        group = groups.setdefault(repr(fields_key(record)), len(groups))
        lines.append(f"{path.relative_to(results)}: valid | key {experiment_key(record)} | "
                     f"label {label(record['spec'])} | compare {spec_label(record)} "
                     f"group {group}")
    return lines


def main(argv: list[str]) -> int:
    results = Path(argv[1] if len(argv) > 1 else "results")
    for title, args, hashed in commands(results):
        text = dtbench(*args)
        print(f"=== {title}: dtbench {' '.join(args)}")
        print(digest(text) if hashed else text)
    print("=== records")
    print("\n".join(per_record(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
