"""The GPU check script on a machine without a GPU: it says so, exits 4, runs nothing."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from harness import gpucheck

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here: the script would run")
def test_without_a_gpu_the_check_says_so_and_exits_4(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "harness.gpucheck", "--out", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 4
    assert "gpucheck needs a CUDA GPU" in done.stderr and "nothing ran" in done.stderr
    assert "Traceback" not in done.stderr and not list(tmp_path.iterdir())


def test_a_check_that_raises_is_a_failed_check_not_a_crash() -> None:
    def broken() -> None:
        raise RuntimeError("NCCL error: unhandled system error")

    check = gpucheck._guarded("bound device", broken)
    assert check.verdict == "fail" and "NCCL error" in check.reason
    assert gpucheck._line(check).startswith("FAIL  bound device: RuntimeError")
