"""How a test reacts when infrastructure it needs is missing.

A machine that truly cannot have it (not root, no apt-get, no `tc`) skips with the reason.
Infrastructure that could be had but failed to install or start (apt-get failed, the Slurm
cluster did not come up, the browser crashed) is a failure in CI, where it must work, and a
skip with the reason elsewhere.
"""
from __future__ import annotations

import os
from typing import NoReturn

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def failed_to_start(reason: str) -> NoReturn:
    """Infrastructure that should have worked did not: fail in CI, skip elsewhere."""
    if in_ci():
        pytest.fail(f"infrastructure failed in CI: {reason}")
    pytest.skip(reason)
