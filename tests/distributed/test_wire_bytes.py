"""Bytes on the wire, read at the socket: every collective of gloo at 2 and 3 ranks, inside a
private network namespace whose loopback counters count nothing but this test's traffic, is
within 2% of harness.core.traffic.wire_bytes (summed over ranks, per collective, headers and
the rendezvous included in the measurement)."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.core.traffic import mean_wire_bytes

SCRIPT = r'''
import json, os, sys
import torch, torch.distributed as dist, torch.multiprocessing as mp

def lo_tx():
    for line in open("/proc/net/dev"):
        if line.strip().startswith("lo:"):
            return int(line.split(":")[1].split()[8])

def worker(rank, n, op, numel, reps, queue):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29561", GLOO_SOCKET_IFNAME="lo")
    dist.init_process_group("gloo", rank=rank, world_size=n)
    x = torch.ones(numel)
    def run():
        if op == "allreduce":
            dist.all_reduce(x)
        elif op == "allgather":
            dist.all_gather_into_tensor(torch.empty(numel * n), x)
        elif op == "reducescatter":
            dist.reduce_scatter_tensor(torch.empty(numel), torch.ones(numel * n))
        elif op == "broadcast":
            dist.broadcast(x, 0)
    run()
    dist.barrier()
    if rank == 0:
        queue.put(lo_tx())
    dist.barrier()
    for _ in range(reps):
        run()
    dist.barrier()
    if rank == 0:
        queue.put(lo_tx())
    dist.barrier()
    dist.destroy_process_group()

if __name__ == "__main__":
    n, op, numel, reps = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    queue = mp.get_context("spawn").Queue()
    mp.spawn(worker, args=(n, op, numel, reps, queue), nprocs=n)
    start, end = queue.get(), queue.get()
    print(json.dumps({"bytes_per_op": (end - start) / reps}))
'''
NUMEL, REPS = 1 << 20, 8  # 4 MiB tensors: headers and barriers stay well under 1%


def _netns_unavailable() -> str | None:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "unshare or ip missing"
    done = subprocess.run(["unshare", "-n", "true"], capture_output=True)
    return None if done.returncode == 0 else "cannot create a network namespace (not root?)"


@pytest.mark.skipif(_netns_unavailable() is not None, reason=str(_netns_unavailable()))
@pytest.mark.parametrize("world_size", [2, 3])
@pytest.mark.parametrize("op", ["allreduce", "allgather", "reducescatter", "broadcast"])
def test_gloo_collectives_put_the_formula_s_bytes_on_the_wire(tmp_path: Path, op: str,
                                                              world_size: int) -> None:
    script = tmp_path / "measure.py"
    script.write_text(SCRIPT)
    done = subprocess.run(
        ["unshare", "-n", "sh", "-c", f"ip link set lo up && {sys.executable} {script} "
         f"{world_size} {op} {NUMEL} {REPS}"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    measured = json.loads(done.stdout.strip().splitlines()[-1])["bytes_per_op"]
    # The payload as the caller passes it: all-gather output, reduce-scatter input.
    payload = NUMEL * 4 * (world_size if op in ("allgather", "reducescatter") else 1)
    expected = world_size * mean_wire_bytes(op, payload, world_size, "gloo")
    assert measured == pytest.approx(expected, rel=0.02), (measured / expected)
