"""The GPU check script on a machine without a GPU: it says so, exits 4, runs nothing."""
from __future__ import annotations

import subprocess
import sys
import warnings
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


def _sync(filename: str, lineno: int) -> warnings.WarningMessage:
    return warnings.WarningMessage(UserWarning("called a synchronizing CUDA operation"),
                                   UserWarning, filename, lineno)


SITE_PACKAGES = "/usr/lib/python3.11/site-packages"


def test_hidden_syncs_are_found_where_torch_reports_them() -> None:
    """set_sync_debug_mode("warn") attributes each synchronising call to the Python line that
    made it: the step timer's designed reads pass, GradScaler's .item() once a step is what
    fp16 costs, anything else fails with its site."""
    timer = _sync("/work/main/backends/cuda.py", 51)
    scaler = _sync(f"{SITE_PACKAGES}/torch/amp/grad_scaler.py", 371)
    stray = _sync("/work/main/workloads/lstm/model.py", 88)
    other = warnings.WarningMessage(UserWarning("something else"), UserWarning, "x.py", 1)
    sites = gpucheck.sync_sites([timer, timer, scaler, scaler, other])
    assert sites == {"backends/cuda.py:51": 2, "torch/amp/grad_scaler.py:371": 2}
    assert gpucheck.judge_syncs(sites, 2, "fp16").verdict == "pass"
    fp16 = gpucheck.judge_syncs(sites, 2, "fp16")
    assert "1.00 a step in GradScaler" in fp16.value
    assert gpucheck.judge_syncs(sites, 2, "bf16").verdict == "fail"  # bf16 has no scaler
    assert gpucheck.judge_syncs({"backends/cuda.py:51": 3}, 30, "bf16").verdict == "pass"
    strays = gpucheck.sync_sites([timer, stray])
    judged = gpucheck.judge_syncs(strays, 30, "bf16")
    assert judged.verdict == "fail" and "workloads/lstm/model.py:88" in judged.reason


def test_an_fp16_runs_record_says_where_it_synchronises(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    from backends.cuda import GRAD_SCALER_SYNC, CUDABackend

    # configure() sets process-wide cuDNN and TF32 flags: put them back afterwards
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", torch.backends.cudnn.benchmark)
    for flags in (torch.backends.cuda.matmul, getattr(torch.backends.cudnn, "conv", None)):
        if hasattr(flags, "fp32_precision"):
            monkeypatch.setattr(flags, "fp32_precision", flags.fp32_precision)
    backend = CUDABackend()
    backend.bound = torch.device("cuda", 0)  # configure reads the bound device, not a GPU
    assert backend.configure(0, "fp16")["grad_scaler_sync"] == GRAD_SCALER_SYNC
    assert "_maybe_opt_step" in GRAD_SCALER_SYNC
    assert "grad_scaler_sync" not in backend.configure(0, "bf16")
