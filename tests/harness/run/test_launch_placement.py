"""Launches that cannot silently split or starve: torchrun across nodes without a rendezvous
address and port is refused before anything starts, and a GPU rank gets its share of the
node's cores as OMP_NUM_THREADS (the generated srun, mpirun and torchrun lines are in
tests/backends/test_launchers.py)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from harness.core.errors import UsageError
from harness.run import guard
from harness.run.supervisor import Supervisor
from harness.spec.specs import LaunchOptions, RunSpec

TWO_NODES = RunSpec(workload="hep_cnn", size="tiny", batch_per_rank=4, steps=3, comm="gloo",
                    launcher="torchrun", nnodes=2, nproc_per_node=1)
GPU = RunSpec(workload="resnet50", backend="cuda", comm="nccl", nproc_per_node=4)


def _launched(monkeypatch: pytest.MonkeyPatch, spec: RunSpec, launch: LaunchOptions) -> Any:
    """Supervisor.run with the launcher replaced by one that starts nothing: what it raises."""
    supervisor = Supervisor(spec, launch, "placement-test")
    started: list[Any] = []

    def commands(spec: Any, launch: Any, rank_args: list[str], forward: Sequence[str]) -> list:
        started.append(launch)
        return []

    monkeypatch.setattr(supervisor.launcher, "commands", commands)
    with pytest.raises(Exception) as caught:  # which one is the point
        supervisor.run()
    return caught.value, started


@pytest.mark.parametrize(("launch", "named"), [
    (LaunchOptions(), "--master-addr and --master-port"),
    (LaunchOptions(master_addr="node0"), "--master-port"),
    (LaunchOptions(master_port=29500), "--master-addr")])
def test_torchrun_across_nodes_needs_the_address_and_the_port(
        monkeypatch: pytest.MonkeyPatch, launch: LaunchOptions, named: str) -> None:
    """Without them each node's dtbench would take its own host name and a free port of its
    own: two jobs that each wait for the other node until the rank timeout."""
    error, started = _launched(monkeypatch, TWO_NODES, launch)
    assert isinstance(error, UsageError) and named in str(error) and not started
    assert "2 nodes" in str(error)


def test_the_rendezvous_check_leaves_one_node_mpirun_and_srun_alone() -> None:
    guard.check_rendezvous(TWO_NODES, LaunchOptions(master_addr="node0", master_port=29500))
    guard.check_rendezvous(TWO_NODES.replace(nnodes=1), LaunchOptions())
    for launcher in ("mpirun", "slurm"):
        guard.check_rendezvous(TWO_NODES.replace(launcher=launcher), LaunchOptions())


def _rank_environment(monkeypatch: pytest.MonkeyPatch, spec: RunSpec) -> dict[str, str]:
    supervisor = Supervisor(spec, LaunchOptions(), "placement-env")
    try:
        return supervisor._environment()
    finally:
        supervisor.run_dir.remove()


def test_a_gpu_rank_gets_its_share_of_the_cores_as_its_openmp_threads(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(guard, "usable_cores", lambda: 64)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert _rank_environment(monkeypatch, GPU)["OMP_NUM_THREADS"] == "16"
    assert _rank_environment(monkeypatch, GPU.replace(threads=6))["OMP_NUM_THREADS"] == "6"
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the user's own setting stays
    assert _rank_environment(monkeypatch, GPU)["OMP_NUM_THREADS"] == "3"
    monkeypatch.delenv("OMP_NUM_THREADS")
    cpu = GPU.replace(backend="cpu", comm="gloo", nproc_per_node=2)
    assert "OMP_NUM_THREADS" not in _rank_environment(monkeypatch, cpu)  # torch's default
    assert _rank_environment(monkeypatch, cpu.replace(threads=2))["OMP_NUM_THREADS"] == "2"
