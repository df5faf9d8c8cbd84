"""Which code a record measured and which machine it names: the commit, branch and dirty
flag of the code under test (`--commit`, else the working directory's git checkout), the URL
of the CI run that made it, and the name given with `--machine`. dtbench's own version is
apart, in the record's `harness`."""
from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Branch names CI services put in the environment (a CI checkout is often a detached HEAD).
BRANCH_VARIABLES = ("GITHUB_HEAD_REF", "GITHUB_REF_NAME", "CI_COMMIT_REF_NAME",
                    "BUILDKITE_BRANCH", "CIRCLE_BRANCH", "BRANCH_NAME", "GIT_BRANCH")


def ci_url(environ: Mapping[str, str]) -> str | None:
    """The URL of the CI run this process belongs to, from the variables each service sets."""
    if environ.get("GITHUB_RUN_ID") and environ.get("GITHUB_REPOSITORY"):
        server = environ.get("GITHUB_SERVER_URL", "https://github.com").rstrip("/")
        return f"{server}/{environ['GITHUB_REPOSITORY']}/actions/runs/{environ['GITHUB_RUN_ID']}"
    for name in ("CI_JOB_URL", "BUILDKITE_BUILD_URL", "CIRCLE_BUILD_URL", "BUILD_URL"):
        if environ.get(name):
            return environ[name]
    if environ.get("SYSTEM_COLLECTIONURI") and environ.get("BUILD_BUILDID"):
        return (f"{environ['SYSTEM_COLLECTIONURI'].rstrip('/')}/"
                f"{environ.get('SYSTEM_TEAMPROJECT', '')}/_build/results?buildId="
                f"{environ['BUILD_BUILDID']}")
    return None


def _git(directory: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(directory), *args], capture_output=True,
                              text=True, timeout=10, check=True)
    except (subprocess.SubprocessError, OSError):
        return None
    return done.stdout.strip()


def code_under_test(commit: str | None = None, directory: Path | None = None,
                    environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The record's `code`: commit, branch, dirty (null where unknown) and ci_url."""
    environ = os.environ if environ is None else environ
    branch = next((environ[name] for name in BRANCH_VARIABLES if environ.get(name)), None)
    dirty = None
    if commit is None:
        where = directory or Path.cwd()
        commit = _git(where, "rev-parse", "HEAD") or None
        if commit is not None:
            head = _git(where, "rev-parse", "--abbrev-ref", "HEAD")
            branch = branch or (head if head and head != "HEAD" else None)
            status = _git(where, "status", "--porcelain", "--untracked-files=no")
            dirty = None if status is None else bool(status)
    return {"commit": commit, "branch": branch, "dirty": dirty, "ci_url": ci_url(environ)}


@dataclass(frozen=True)
class Provenance:
    """What the command line says about the records it writes: the machine's name and the
    commit measured (None: take them from the fingerprint and the working directory)."""

    machine: str | None = None
    commit: str | None = None

    def machine_entry(self, machine: dict[str, Any]) -> dict[str, Any]:
        """The fingerprint with the name given to the machine."""
        return {**machine, "name": self.machine} if self.machine else machine

    def code(self) -> dict[str, Any]:
        return code_under_test(self.commit)
