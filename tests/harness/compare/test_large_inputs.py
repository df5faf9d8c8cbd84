"""report and compare on a pytest-benchmark file of 100,000 rounds: the statistics scale
(the median's CI used to be cubic in the sample count: 56 s at 20,000 samples). The time is
printed by benchmarks/bench_large_inputs.py; here pytest-timeout only catches a return
of the cubic case."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from harness.commands.cli import main

ROUNDS = 100_000


def benchmark_file(path: Path, rounds: int, scale: float = 1.0, seed: int = 0) -> Path:
    """A `--benchmark-json` file like pytest-benchmark writes for a microsecond function."""
    data = (np.random.default_rng(seed).lognormal(np.log(20e-6), 0.1, rounds) * scale).tolist()
    path.write_text(json.dumps({
        "machine_info": {"node": "n", "processor": "x86_64", "cpu": {"brand_raw": "cpu"}},
        "commit_info": {}, "datetime": "2024-01-02T03:04:05+00:00", "version": "5.2.3",
        "benchmarks": [{"name": "test_sum", "fullname": "bench.py::test_sum",
                        "stats": {"data": data, "rounds": rounds, "iterations": 1},
                        "extra_info": {}}]}))
    return path


@pytest.mark.timeout(120)
def test_report_and_compare_handle_100k_rounds(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    base = benchmark_file(tmp_path / "base.json", ROUNDS)
    slow = benchmark_file(tmp_path / "slow.json", ROUNDS, scale=1.2, seed=1)
    assert main(["report", str(base), "-o", str(tmp_path / "r.md")]) == 0
    assert "1 record (1 success)" in (tmp_path / "r.md").read_text()
    assert main(["compare", str(base), str(slow)]) == 1
    out = capsys.readouterr().out
    assert f"{ROUNDS}/{ROUNDS} steps" in out and "regression" in out
