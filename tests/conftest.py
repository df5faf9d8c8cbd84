"""Puts the repository root on sys.path so tests import `backends`, `harness`, `workloads`;
shared fixtures for every test directory."""
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PeakSeeder = Callable[[Path, float, Iterable[int]], None]


@pytest.fixture(scope="session")
def seed_peak_cache() -> PeakSeeder:
    """Writes a fake cpu/fp32 peak into a cache folder, so runs pointed at it (through
    DTBENCH_CACHE_DIR) spend no time timing GEMMs."""

    def seed(folder: Path, flops: float, threads: Iterable[int]) -> None:
        import torch

        from backends.cpu import CPUBackend
        from harness import peak

        saved = os.environ.get("DTBENCH_CACHE_DIR")
        os.environ["DTBENCH_CACHE_DIR"] = str(folder)
        try:
            device_name = CPUBackend().device_name(torch.device("cpu"))
            for count in threads:
                peak.store_peak(peak.PeakResult(
                    backend="cpu", device_name=device_name, precision="fp32", threads=count,
                    flops=flops, memory_bandwidth=1.0e10, per_size={"1024": flops},
                    measured_at="2024-01-01T00:00:00+00:00", torch=torch.__version__))
                assert peak.cached_peak("cpu", device_name, "fp32", count) is not None
        finally:
            if saved is None:
                os.environ.pop("DTBENCH_CACHE_DIR", None)
            else:
                os.environ["DTBENCH_CACHE_DIR"] = saved

    return seed
