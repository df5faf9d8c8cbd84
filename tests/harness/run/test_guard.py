"""The guard refuses runs the machine cannot hold, with the figures, before anything starts."""
from __future__ import annotations

from pathlib import Path

import pytest

from harness.core.errors import UsageError
from harness.run import guard
from harness.spec.specs import RunSpec
from workloads import get_workload
from workloads.memory import STATE_BYTES_PER_PARAMETER, training_bytes

SPEC = RunSpec(workload="hep_cnn", size="tiny", comm="gloo", nproc_per_node=64, nnodes=1,
               batch_per_rank=16, steps=2, threads=1)


def test_more_than_four_threads_per_core_is_refused_naming_cores_and_estimate() -> None:
    with pytest.raises(UsageError) as caught:
        guard.check_fits(SPEC, cores=2, memory=64 * 2**30)
    message = str(caught.value)
    assert "64 threads on 2 usable core(s)" in message and "estimated" in message
    assert "--oversubscribe" in message
    guard.check_fits(SPEC.replace(nproc_per_node=8), cores=2, memory=64 * 2**30)  # 4x: fits


def test_estimated_memory_beyond_the_machine_is_refused() -> None:
    spec = SPEC.replace(nproc_per_node=2)
    estimate = guard.node_memory_estimate(spec)
    assert estimate == 2 * (guard.PROCESS_BYTES + training_bytes(get_workload("hep_cnn"), "tiny",
                                                                 16))
    with pytest.raises(UsageError, match="exceeds the memory"):
        guard.check_fits(spec, cores=64, memory=estimate - 1)
    guard.check_fits(spec, cores=64, memory=estimate)


def test_oversubscribe_lets_it_through() -> None:
    guard.check_all([SPEC], oversubscribe=True)
    with pytest.raises(UsageError):
        guard.check_all([SPEC], oversubscribe=False)


def test_training_bytes_counts_state_and_batch_dependent_activations() -> None:
    workload = get_workload("lstm")
    one, two = training_bytes(workload, "tiny", 1), training_bytes(workload, "tiny", 2)
    parameters = sum(p.numel() for p in workload.build_model("tiny").parameters())
    assert one - (two - one) == parameters * STATE_BYTES_PER_PARAMETER  # state, then per sample
    assert two > one


def test_cli_refuses_64_ranks_and_oversubscribe_passes_the_guard(run_cli, tmp_path: Path
                                                                 ) -> None:
    refused = run_cli("run", "-w", "hep_cnn", "--size", "tiny", "-n", "64", "--out", "store")
    assert refused.returncode == 2
    assert "usable core" in refused.stderr and "estimated" in refused.stderr
    assert not (tmp_path / "store").exists()
    # Through the guard; the unavailable backend then skips the run before any rank starts.
    passed = run_cli("run", "-w", "hep_cnn", "--size", "tiny", "-n", "64", "-b", "cuda",
                     "--oversubscribe", "--out", "store", "-q")
    assert passed.returncode == 4, passed.stderr
    assert "nothing ran: every run was skipped" in passed.stderr


def test_more_gpu_ranks_than_gpus_are_refused_unless_shared() -> None:
    """Two ranks on a one-GPU node: NCCL would die with "Duplicate GPU detected", gloo would
    count the board's energy and peak twice; a usage error says so, before anything runs."""
    check_gpus = guard.check_gpus
    spec = RunSpec(workload="resnet50", backend="cuda", comm="nccl", nproc_per_node=2)
    with pytest.raises(UsageError, match="2 rank.* 1 visible GPU.*--share-gpu"):
        check_gpus(spec, gpus=1)
    check_gpus(spec, gpus=2)
    check_gpus(spec.replace(share_gpu=True), gpus=1)
    check_gpus(spec.replace(backend="cpu", comm="gloo"), gpus=1)
