"""pytest-benchmark hooks for bench_steps.py: dtbench's fingerprint in the saved JSON.

The other files here are scripts, not tests; nothing in this folder is collected by a plain
`pytest` run, and this module imports nothing heavy until pytest-benchmark saves a file.
"""
from __future__ import annotations

from typing import Any

import pytest


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config: pytest.Config,
                                         machine_info: dict[str, Any]) -> None:
    """The same machine/software/harness fingerprint a dtbench record carries, so the
    converter in harness/store/pytest_benchmark.py can rebuild records from the JSON alone."""
    from harness.machine import fingerprint as sysinfo

    machine_info["dtbench"] = {"machine": sysinfo.machine_info(),
                               "software": sysinfo.software_info(),
                               "harness": sysinfo.harness_info()}
