"""Bytes on the wire, read at the socket: every collective of gloo and of MPI (Open MPI over
TCP) at 2 and 3 ranks, issued through dtbench's counting process group inside a private
network namespace whose loopback counters count nothing but this test's traffic. The wire
bytes the meter counted (summed over ranks) are within 2% of what the loopback carried, and
equal to harness.facts.traffic.wire_bytes, while the payload is the tensors handed over."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.facts.traffic import mean_wire_bytes

ROOT = Path(__file__).resolve().parents[2]
OPS = ("allreduce", "allgather", "reducescatter", "broadcast")
SCRIPT = r'''
import json, os, sys
import torch, torch.distributed as dist
from harness.comm.meter import CommMeter, register_counted_backend
sys.path.insert(0, os.environ["LOOPBACK_DIR"])
import loopback  # the sockets' bytes: tests/distributed/loopback.py

def measure(comm, numel, reps, rank=None, n=None, queue=None):
    meter = CommMeter()
    name = register_counted_backend(comm, meter)
    if comm == "mpi":
        from harness.comm.mpi_group import init_mpi_process_group
        init_mpi_process_group(backend=name)
    else:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29561", GLOO_SOCKET_IFNAME="lo")
        dist.init_process_group(name, rank=rank, world_size=n)
    n, rank = dist.get_world_size(), dist.get_rank()
    x = torch.ones(numel)
    calls = {"allreduce": lambda: dist.all_reduce(x),
             "allgather": lambda: dist.all_gather_into_tensor(torch.empty(numel * n), x),
             "reducescatter": lambda: dist.reduce_scatter_tensor(torch.empty(numel),
                                                                 torch.ones(numel * n)),
             "broadcast": lambda: dist.broadcast(x, 0)}
    found = {}
    for op, call in calls.items():
        call()
        dist.barrier()
        meter.end_step()
        start = loopback.mark()
        dist.barrier()
        for _ in range(reps):
            call()
        meter.end_step()
        dist.barrier()
        sent = loopback.sent_since(start)
        dist.barrier()
        counted = torch.tensor([float(sum(meter.steps[-1].values())),
                                float(meter.payload_steps[-1])], dtype=torch.float64)
        dist.all_reduce(counted)
        found[op] = {"measured": sent / reps, "wire": counted[0].item() / reps,
                     "payload": counted[1].item() / reps}
    if rank == 0:
        print(json.dumps(found), flush=True)
    dist.destroy_process_group()

def _entry(rank, comm, numel, reps, n):
    measure(comm, numel, reps, rank, n)

if __name__ == "__main__":
    comm, n, numel, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    if comm == "mpi":
        measure(comm, numel, reps)
    else:
        import torch.multiprocessing as mp
        mp.spawn(_entry, args=(comm, numel, reps, n), nprocs=n)
'''
NUMEL, REPS = 1 << 20, 6  # 4 MiB tensors: headers and barriers stay well under 1%


def _netns_unavailable() -> str | None:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "unshare or ip missing"
    done = subprocess.run(["unshare", "-n", "true"], capture_output=True)
    return None if done.returncode == 0 else "cannot create a network namespace (not root?)"


def _mpi_unavailable() -> str | None:
    import importlib.util

    if shutil.which("mpirun") is None or importlib.util.find_spec("mpi4py") is None:
        return "mpi4py or mpirun not installed"
    return None


def _command(comm: str, world_size: int, script: Path) -> str:
    args = f"{script} {comm} {world_size} {NUMEL} {REPS}"
    if comm == "gloo":
        return f"{sys.executable} {args}"
    # TCP only (no shared memory), on the namespace's loopback; root needs the two variables.
    return (f"OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe "
            f"-n {world_size} --mca btl tcp,self --mca btl_tcp_if_include lo "
            f"--mca oob_tcp_if_include lo {sys.executable} {args}")


@pytest.mark.skipif(_netns_unavailable() is not None, reason=str(_netns_unavailable()))
@pytest.mark.parametrize("world_size", [2, 3])
@pytest.mark.parametrize("comm", ["gloo", pytest.param("mpi", marks=pytest.mark.skipif(
    _mpi_unavailable() is not None, reason=str(_mpi_unavailable())))])
def test_counted_wire_bytes_are_the_sockets(tmp_path: Path, comm: str, world_size: int) -> None:
    script = tmp_path / "measure.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
           "LOOPBACK_DIR": str(Path(__file__).resolve().parent)}
    done = subprocess.run(["unshare", "-n", "sh", "-c",
                           f"ip link set lo up && {_command(comm, world_size, script)}"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(found) == set(OPS)
    for op, figures in found.items():
        # The payload as the caller passes it (all-gather output, reduce-scatter input), on
        # every rank; the wire bytes as the backend's algorithm sends them.
        payload = NUMEL * 4 * (world_size if op in ("allgather", "reducescatter") else 1)
        assert figures["payload"] == world_size * payload, op
        assert figures["wire"] == pytest.approx(
            world_size * mean_wire_bytes(op, payload, world_size, comm), rel=1e-9), op
        # The sockets' own bytes (tests/distributed/loopback.py): headers and TCP's resent
        # segments are not the backend's
        assert figures["wire"] * 0.98 <= figures["measured"] <= figures["wire"] * 1.02, \
            (op, figures["measured"] / figures["wire"])


# --- every strategy, through the strategy checker (tests/distributed/strategy_check.py) -------

CHECK = Path(__file__).resolve().parent / "strategy_check.py"
# alexnet tiny (3.6 MB of parameters): per-message headers stay well under 1% of the bytes.
WORKLOAD = "alexnet"
STRATEGY_ENTRIES = {  # options where a strategy's default does not fit 2 or 3 ranks
    2: ["ddp", "zero1", "fsdp", "localsgd", "ps-sync", "ps-async", "downpour", "ssp:s=2",
        "hogwild", "gossip", "hybrid:groups=1", "pipeline", "tensor", "dp-tp", "fsdp-tp"],
    # tensor parallelism splits alexnet's 512-wide layers, which 3 does not divide (the run
    # refuses it): dp-tp and fsdp-tp run as a 3 x 1 mesh
    3: ["ddp", "zero1", "fsdp", "localsgd", "ps-sync", "ps-async", "downpour", "ssp:s=2",
        "hogwild", "gossip", "hybrid:groups=2", "pipeline", "dp-tp:tp=1",
        "sandblaster:portions=2", "fsdp-tp:tp=1"],
}


def _strategies_command(comm: str, world_size: int, out: Path) -> str:
    entries = " ".join(STRATEGY_ENTRIES[world_size])
    args = f"{CHECK} {out} {WORKLOAD} {entries}"
    if comm == "mpi":
        return (f"OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun "
                f"--oversubscribe -n {world_size} --mca btl tcp,self --mca btl_tcp_if_include "
                f"lo --mca oob_tcp_if_include lo {sys.executable} {args}")
    ranks = " ".join(f"RANK={r} {sys.executable} {args} &" for r in range(world_size))
    return f"{ranks} wait"


@pytest.mark.skipif(_netns_unavailable() is not None, reason=str(_netns_unavailable()))
@pytest.mark.parametrize("comm, world_size", [
    # The default run: gloo at 3 ranks and MPI at 2 (each ~32 s on 2 cores); `--matrix` adds
    # the other two.
    pytest.param("gloo", 2, marks=pytest.mark.matrix), ("gloo", 3),
    pytest.param("mpi", 2, marks=pytest.mark.skipif(_mpi_unavailable() is not None,
                                                    reason=str(_mpi_unavailable()))),
    pytest.param("mpi", 3, marks=[pytest.mark.matrix, pytest.mark.skipif(
        _mpi_unavailable() is not None, reason=str(_mpi_unavailable()))])])
def test_every_strategy_counts_the_bytes_its_sockets_carry(tmp_path: Path, comm: str,
                                                           world_size: int) -> None:
    """Each strategy's set-up, steps and finish: the wire bytes all ranks counted against the
    loopback bytes of the same span (rank 0 reads them between barriers). Anything that moved
    data outside the counting process group would show here."""
    out = tmp_path / "wire.json"
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29571",
           "WORLD_SIZE": str(world_size), "CHECK_COMM": comm, "CHECK_WIRE": "1",
           "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    done = subprocess.run(["unshare", "-n", "sh", "-c", "ip link set lo up && "
                           + _strategies_command(comm, world_size, out)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0 and out.exists(), done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert list(report) == STRATEGY_ENTRIES[world_size]
    ddp = report["ddp"]["wire"]["counted"]
    for entry, found in report.items():
        wire = found["wire"]
        if entry == "hogwild":  # one shared model: nothing but the barriers' few bytes
            assert wire["counted"] == 0 and wire["measured"] < 1e-3 * ddp, wire
            continue
        # The sockets' own bytes, headers and TCP's resent segments left out (loopback.py):
        # measured 0.9997-1.0000 of the count for every strategy over Open MPI at 2 ranks
        assert wire["counted"] * 0.98 <= wire["measured"] <= wire["counted"] * 1.02, \
            (entry, wire["measured"] / wire["counted"])
