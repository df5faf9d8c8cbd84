"""Each rank's GPU from its local rank under every launcher, bound before the process group;
NCCL given the device; no synchronisation without a device. torch.cuda is mocked: there is no
GPU here, so these check the calls, not a GPU."""
from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from harness.rank import environment
from harness.rank.environment import bind_device, identity_from_env, init_comm

ROOT = Path(__file__).resolve().parents[3]
# What each launcher sets for the rank with global rank 5 and local rank 1 of 8 ranks.
LAUNCHERS = {
    "torchrun": {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1"},
    "mpirun (Open MPI)": {"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8",
                          "OMPI_COMM_WORLD_LOCAL_RANK": "1"},
    "mpirun (MPICH/Hydra)": {"PMI_RANK": "5", "PMI_SIZE": "8", "MPI_LOCALRANKID": "1"},
    "srun": {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1"},
}


@pytest.fixture
def gpus(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """A node whose visible GPU count the test sets; set_device calls are recorded."""
    state = SimpleNamespace(count=4, current=[])
    monkeypatch.setattr(torch.cuda, "device_count", lambda: state.count)
    monkeypatch.setattr(torch.cuda, "set_device", state.current.append)
    for name in {n for env in LAUNCHERS.values() for n in env} | {"CUDA_VISIBLE_DEVICES"}:
        monkeypatch.delenv(name, raising=False)
    return state


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize(("visible", "expected"), [(4, 1), (1, 0)])
def test_each_rank_binds_the_gpu_of_its_local_rank(gpus: SimpleNamespace, launcher: str,
                                                   visible: int, expected: int,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Four visible GPUs: local rank 1 takes cuda:1. One visible GPU per task (srun
    --gpus-per-task, or CUDA_VISIBLE_DEVICES per rank): every rank takes cuda:0."""
    gpus.count = visible
    if visible == 1:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    who = identity_from_env(LAUNCHERS[launcher])
    assert (who.rank, who.world_size, who.local_rank) == (5, 8, 1)
    device = bind_device(SimpleNamespace(comm="nccl", backend="cuda"), who)
    assert device == torch.device("cuda", expected)
    assert gpus.current == [torch.device("cuda", expected)]


def test_a_cpu_run_binds_nothing(gpus: SimpleNamespace) -> None:
    who = identity_from_env(LAUNCHERS["srun"])
    assert bind_device(SimpleNamespace(comm="gloo", backend="cpu"), who) is None
    assert gpus.current == []


def test_the_trainers_device_is_the_bound_one(gpus: SimpleNamespace) -> None:
    """configure() after bind() keeps the bound GPU (it used $LOCAL_RANK, absent under
    mpirun, and made cuda:0 current)."""
    from backends.cuda import CUDABackend

    backend = CUDABackend()
    device = backend.bind(3)
    backend.configure(1, "fp32")
    assert device == torch.device("cuda", 3)
    assert gpus.current == [device]


def test_nccl_gets_the_device_and_its_own_watchdog_timeout_at_init(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The rendezvous waits the rank timeout; NCCL's watchdog its own --comm-timeout; gloo's
    group the rank timeout."""
    calls: list[dict[str, Any]] = []
    stores: list[float] = []
    monkeypatch.setattr(environment.dist, "init_process_group",
                        lambda **kwargs: calls.append(kwargs))
    monkeypatch.setattr(environment, "rendezvous_store",
                        lambda who, timeout: stores.append(timeout.total_seconds()) or "store")
    monkeypatch.setenv("MASTER_PORT", "29500")
    monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)
    who = identity_from_env(LAUNCHERS["torchrun"])
    gpu = torch.device("cuda", 1)
    init_comm(SimpleNamespace(comm="nccl"), who, 60, None, gpu, 900)
    init_comm(SimpleNamespace(comm="gloo"), who, 60, None, None, 900)
    assert calls[0]["device_id"] == gpu and calls[0]["backend"] == "nccl"
    assert "device_id" not in calls[1]
    assert [c["timeout"].total_seconds() for c in calls] == [900, 60]
    assert stores == [60, 60]


def _bare_synchronize_calls(path: Path) -> list[int]:
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        # torch.cuda.synchronize() / cuda.synchronize(); an event's synchronize() waits for
        # that event, on the device it was recorded on.
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "synchronize" and not node.args and not node.keywords \
                and ((isinstance(node.func.value, ast.Attribute)
                      and node.func.value.attr == "cuda")
                     or (isinstance(node.func.value, ast.Name) and node.func.value.id == "cuda")):
            lines.append(node.lineno)
    return lines


def test_every_synchronize_names_its_device() -> None:
    """torch.cuda.synchronize() without a device waits for the current device only: a call
    on another rank's GPU would time launches, not kernels."""
    found = {str(path.relative_to(ROOT)): lines for folder in ("harness", "backends",
                                                                "workloads")
             for path in sorted((ROOT / folder).rglob("*.py"))
             if (lines := _bare_synchronize_calls(path))}
    assert found == {}


def test_an_nccl_run_records_its_counted_bytes_as_the_ring_formulas(tmp_path: Path) -> None:
    """NCCL goes through the counting wrapper like gloo and MPI: its record carries the bytes
    the ranks counted, and says that NCCL's wire volumes are the ring formulas, not verified
    at a socket (no GPU has run them)."""
    from harness.run.collect import collect_run
    from harness.rundir import RankResult
    from harness.spec.specs import RunSpec
    from harness.store.directory import Store

    spec = RunSpec(workload="hep_cnn", size="tiny", backend="cuda", comm="nccl",
                   nproc_per_node=2, batch_per_rank=4, steps=3, warmup=1)
    step = {"gradient": 1000, "parameter": 0, "activation": 0, "control": 8}
    ranks = [RankResult(rank=r, world_size=2, device_name="GPU", settings={},
                        step_times=[0.01, 0.011, 0.012], losses=[1.0, 0.9, 0.8],
                        comm_bytes=[step] * 3, comm_payload=[1000] * 3)
             for r in range(2)]
    collected = collect_run(spec, ranks, None, Store(tmp_path / "store"))
    counted = {m.name: m for m in collected.metrics}["comm_bytes"]
    assert counted.value == 1008 and counted.extra["wire_formula_verified"] is False
    assert counted.extra["nccl_algorithm"]["ring_formulas"].startswith("unverified")
    assert "comm_bytes_unavailable" not in collected.notes
    gloo = collect_run(spec.replace(backend="cpu", comm="gloo"), ranks, None,
                       Store(tmp_path / "store"))
    assert {m.name: m for m in gloo.metrics}["comm_bytes"].extra["wire_formula_verified"]


def test_an_nccl_record_says_which_algorithm_its_byte_formulas_assume() -> None:
    from harness.collectors.communication import nccl_algorithm

    chosen = nccl_algorithm({})
    assert chosen["algo"] is None and "not fixed" in chosen["source"]
    assert chosen["ring_formulas"].startswith("unverified")
    ring = nccl_algorithm({"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"})
    assert (ring["algo"], ring["proto"]) == ("Ring", "Simple")
    assert ring["ring_formulas"].startswith("hold")
    assert nccl_algorithm({"NCCL_ALGO": "NVLS"})["ring_formulas"].startswith("unverified")
