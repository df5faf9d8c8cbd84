"""pytest-benchmark hooks for bench_steps.py: dtbench's fingerprint in the saved JSON.

The other files here are scripts that print measurements, not tests; a plain `pytest` run
collects nothing here (testpaths is tests/), and this module imports nothing heavy until
pytest-benchmark saves a file. The repository root goes on sys.path, as tests/conftest.py
puts it there for the tests, so `pytest benchmarks/bench_steps.py` imports this checkout.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config: pytest.Config,
                                         machine_info: dict[str, Any]) -> None:
    """The same machine/software/harness fingerprint a dtbench record carries, so the
    converter in harness/store/pytest_benchmark.py can rebuild records from the JSON alone."""
    from harness.machine import fingerprint as sysinfo

    machine_info["dtbench"] = {"machine": sysinfo.machine_info(),
                               "software": sysinfo.software_info(),
                               "harness": sysinfo.harness_info()}
