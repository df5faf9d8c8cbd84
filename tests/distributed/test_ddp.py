"""Real multi-process data-parallel runs on this machine: gloo (local, torchrun), MPI (mpirun).

Every test here starts real ranks and moves real gradient bytes; sizes are tiny and one
thread per rank keeps them short on 2 cores.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
TINY = ("--size", "tiny", "--threads", "1", "--steps", "4", "--warmup", "1", "-q")
HAVE_MPI = shutil.which("mpirun") is not None and __import__("importlib").util.find_spec(
    "mpi4py") is not None
requires_mpi = pytest.mark.skipif(not HAVE_MPI, reason="mpi4py or mpirun not installed")


def dtbench(*args: str, env: dict[str, str] | None = None, timeout: float = 300,
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def records(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(out.rglob("*.json"))]


def metric(record: dict, name: str) -> dict | None:
    return next((m for m in record["metrics"] if m["name"] == name), None)


def leftover(run_ids: list[str]) -> list[int]:
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.environ().get("DTBENCH_RUN_ID") in run_ids:
                found.append(proc.pid)
        except (psutil.Error, OSError):
            continue
    return found


def test_weak_scaling_names_its_one_rank_baseline(tmp_path: Path) -> None:
    """1 then 2 ranks: the 2-rank record's scaling_efficiency is against the 1-rank record.
    (Every strategy x workload x placement runs in test_strategies.py.)"""
    out = tmp_path / "store"
    result = dtbench("run", "-w", "hep_cnn", "-n", "1,2", "--comm", "gloo",
                     *TINY, "--out", str(out), env={"DTBENCH_CHECK_SYNC": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    found = records(out)
    assert len(found) == 2 and all(r["status"] == "success" for r in found), \
        [(r["spec"]["workload"], r["error"]) for r in found]
    by_key = {(r["spec"]["workload"], r["spec"]["world_size"]): r for r in found}
    for workload in ("hep_cnn",):
        record = by_key[(workload, 2)]
        efficiency = metric(record, "scaling_efficiency")
        assert efficiency is not None and efficiency["value"] > 0
        assert efficiency["baseline_run_id"] == by_key[(workload, 1)]["run_id"]
        assert efficiency["kind"] == "weak"
        assert metric(record, "comm_bytes_gradient")["value"] > 0
        assert len(metric(record, "step_time")["samples"]) == 4
        assert record["notes"]["replicas_checked_steps"] == 4


LAUNCHERS = ["local", "torchrun", pytest.param("mpirun", marks=requires_mpi)]


@pytest.mark.parametrize("launcher", ["local", pytest.param("torchrun", marks=pytest.mark.matrix),
                                      pytest.param("mpirun", marks=requires_mpi)])
def test_sigkilled_rank_fails_the_run_without_orphans(tmp_path: Path, launcher: str) -> None:
    out = tmp_path / "store"
    result = dtbench("run", "-w", "hep_cnn", "-n", "2", "--comm", "gloo", "--launcher",
                     launcher, "--size", "tiny", "--threads", "1", "--steps", "20", "-q",
                     "--out", str(out), "--rank-timeout", "60",
                     env={"DTBENCH_FAULT": "kill:1:2"}, timeout=200)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    (record,) = records(out)
    assert record["status"] == "failed"
    assert "rank 1" in record["error"], record["error"]
    assert leftover([record["run_id"]]) == []


@pytest.mark.matrix  # a killed rank's failed record is checked above; the suite going on: --matrix
def test_a_suite_goes_on_after_a_run_whose_rank_was_killed(tmp_path: Path) -> None:
    suite = tmp_path / "two.toml"
    # The fault fires at measured step 4: the 8-step run reaches it, the 3-step run does not.
    suite.write_text('[defaults]\nworkload = "hep_cnn"\nsize = "tiny"\nnproc = 2\n'
                     'comm = "gloo"\nthreads = 1\n[[runs]]\nsteps = 8\n[[runs]]\nsteps = 3\n')
    out = tmp_path / "store"
    result = dtbench("run", str(suite), "-q", "--out", str(out), env={"DTBENCH_FAULT": "kill:1:4"},
                     timeout=300)
    assert result.returncode == 1, result.stdout + result.stderr
    found = sorted(records(out), key=lambda r: r["spec"]["steps"], reverse=True)
    assert [r["status"] for r in found] == ["failed", "success"]
    assert "rank 1 killed by SIGKILL" in found[0]["error"]
    assert leftover([r["run_id"] for r in found]) == []


# An OOM kill is named the same way as the SIGKILL above under every launcher; torchrun's
# case belongs to the full matrix.
@pytest.mark.parametrize("launcher", ["local", pytest.param("torchrun", marks=pytest.mark.matrix),
                                      pytest.param("mpirun", marks=requires_mpi)])
def test_rank_out_of_memory_fails_the_run_naming_rank_and_cause(tmp_path: Path,
                                                                launcher: str) -> None:
    """The rank that failed is named, not a peer that gloo then aborted (SIGABRT) or its
    launcher stopped (SIGTERM)."""
    out = tmp_path / "store"
    result = dtbench("run", "-w", "hep_cnn", "-n", "2", "--comm", "gloo", "--size", "tiny",
                     "--launcher", launcher, "--threads", "1", "--steps", "10", "-q",
                     "--out", str(out),
                     env={"DTBENCH_FAULT": "oom:1:2"}, timeout=200)
    assert result.returncode == 1, result.stdout + result.stderr
    (record,) = records(out)
    assert record["status"] == "failed"
    assert record["error"].startswith("rank 1: out of memory"), record["error"]
    # the rank's own traceback outlives its log (the run directory is removed)
    tail = record["notes"]["traceback_tail"]
    assert "inject_fault" in "\n".join(tail) and "memory" in tail[-1].lower(), tail
    assert leftover([record["run_id"]]) == []


@pytest.mark.parametrize("ranks", [1, 2])
def test_nan_loss_fails_the_run_as_diverged_at_a_step(tmp_path: Path, ranks: int) -> None:
    out = tmp_path / "store"
    comm = ["--comm", "gloo"] if ranks > 1 else []
    result = dtbench("run", "-w", "hep_cnn", "-n", str(ranks), *comm, "--size", "tiny",
                     "--threads", "1", "--steps", "6", "--warmup", "1", "-q", "--out", str(out),
                     env={"DTBENCH_FAULT": f"nan:{ranks - 1}:2"}, timeout=200)
    assert result.returncode == 1, result.stdout + result.stderr
    (record,) = records(out)
    assert record["status"] == "failed"
    assert "diverged at step" in record["error"] and "loss is nan" in record["error"]
    assert leftover([record["run_id"]]) == []


def test_hung_rank_is_detected_and_named(tmp_path: Path) -> None:
    out = tmp_path / "store"
    result = dtbench("run", "-w", "hep_cnn", "-n", "2", "--comm", "gloo", "--size", "tiny",
                     "--threads", "1", "--steps", "10", "-q", "--out", str(out),
                     "--rank-timeout", "15", env={"DTBENCH_FAULT": "hang:0:2"}, timeout=200)
    assert result.returncode == 1
    (record,) = records(out)
    assert record["status"] == "failed"
    assert "hung" in record["error"] and "rank" in record["error"], record["error"]
    assert leftover([record["run_id"]]) == []


def test_comm_allreduce_gloo_reports_nccl_tests_bandwidths(tmp_path: Path) -> None:
    target = tmp_path / "comm.json"
    result = dtbench("comm", "--comm", "gloo", "-n", "2", "--op", "allreduce,allgather",
                     "--sizes", "64K:256K", "--iters", "5", "--warmup", "1", "--out",
                     str(tmp_path / "store"), "--json", str(target), "-q")
    assert result.returncode == 0, result.stderr
    found = json.loads(target.read_text())
    assert [r["spec"]["op"] for r in found] == ["allreduce", "allgather"]
    for record in found:
        busbw, algbw = metric(record, "busbw"), metric(record, "algbw")
        factor = {"allreduce": 2 * (2 - 1) / 2, "allgather": (2 - 1) / 2}[record["spec"]["op"]]
        assert busbw["value"] == pytest.approx(algbw["value"] * factor)
        sizes = [row["bytes"] for row in busbw["per_size"]]
        assert sizes == [65536, 131072, 262144]
        assert metric(record, "latency")["value"] > 0
