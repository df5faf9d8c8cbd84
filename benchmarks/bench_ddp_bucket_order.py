"""Why ddp has no priority option: the order in which DistributedDataParallel launches its
buckets' allreduces, when each completes, and when backward() returns and the next forward pass
can start, on two gloo ranks (a five-layer MLP, one bucket a layer).

    python benchmarks/bench_ddp_bucket_order.py [--steps 3]

Prints, for each step on rank 0, the buckets in launch order (the layers each holds), and
whether backward() returned only after the last bucket's allreduce had completed: if it did,
no bucket order can let the next forward pass start earlier, since the optimizer step and the
forward pass both come after backward(). Orders, not times, are the figure: the machine's
other load cannot change them.
"""
from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn


def hook_recording(events: list[tuple[str, float, Any]]) -> Any:
    # no annotations: DDP checks them, and postponed (string) ones fail its check
    def hook(state, bucket):  # type: ignore[no-untyped-def]
        names = [name for name, p in state if any(p is q for q in bucket.parameters())]
        events.append(("launch", time.perf_counter(), (bucket.index(), names)))
        tensor = bucket.buffer().div_(dist.get_world_size())
        future = dist.all_reduce(tensor, async_op=True).get_future()

        def done(fut: torch.futures.Future[Any]) -> torch.Tensor:
            events.append(("done", time.perf_counter(), bucket.index()))
            return fut.value()[0]

        return future.then(done)
    return hook


def rank_main(rank: int, world: int, port: int, steps: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    layers = [nn.Linear(512, 512) for _ in range(5)]
    model = nn.Sequential(*layers)
    named = [(f"layer{i}", p) for i, layer in enumerate(layers) for p in layer.parameters()]
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=1)  # ~1 layer a bucket
    events: list[tuple[str, float, Any]] = []
    ddp.register_comm_hook(named, hook_recording(events))
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    for step in range(steps + 1):  # step 0 rebuilds the buckets in backward order
        events.clear()
        loss = ddp(torch.randn(64, 512)).pow(2).mean()
        loss.backward()
        returned = time.perf_counter()
        optimizer.step()
        optimizer.zero_grad()
        if rank == 0 and step > 0:
            launches = [data for kind, _, data in events if kind == "launch"]
            last_done = max(t for kind, t, _ in events if kind == "done")
            print(f"step {step}: buckets launched in order "
                  + ", ".join(f"#{index} {'+'.join(sorted(set(names)))}"
                              for index, names in launches))
            print(f"  backward() returned after the last allreduce completed: "
                  f"{returned >= last_done}")
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    mp.spawn(rank_main, args=(2, port, args.steps), nprocs=2, join=True)


if __name__ == "__main__":
    sys.exit(main())
