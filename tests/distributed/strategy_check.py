"""One rank of the strategy equivalence and byte-count check (started by test_strategies.py).

Every rank trains each requested strategy for K steps on the same seeds and data, through the
counting process group, and rank 0 writes, per strategy: the full parameters after the steps
(gathered where sharded), and the bytes each rank counted per step by kind. With CHECK_WIRE=1
(inside a private network namespace) also the wire bytes all ranks counted for the strategy
against what the loopback carried.

    RANK=r WORLD_SIZE=n MASTER_ADDR=127.0.0.1 MASTER_PORT=p \
        python tests/distributed/strategy_check.py OUT.json WORKLOAD STRATEGY[:K=V,...] ...
"""
from __future__ import annotations

import datetime as dt
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness.comm.meter import CommMeter, register_counted_backend  # noqa: E402
from harness.rank.environment import identity_from_env  # noqa: E402
from harness.rank.trainer import Trainer  # noqa: E402
from harness.spec.specs import RunSpec  # noqa: E402
from harness.strategies import STRATEGIES  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import loopback  # noqa: E402 - beside this file

STEPS = 3
DONE = "strategy_check: every rank's part done"


def without_dropout() -> None:
    """CHECK_NO_DROPOUT=1: every Dropout off (p=0), so that model-parallel strategies, whose
    ranks draw dropout masks differently from one process, can be compared exactly."""
    from torch import nn

    import workloads

    for name in workloads.WORKLOADS.names():
        cls = type(workloads.get_workload(name))
        build = cls.build_model

        def patched(self, size, build=build):  # type: ignore[no-untyped-def]
            model = build(self, size)
            for module in model.modules():
                if isinstance(module, nn.Dropout):
                    module.p = 0.0
                if isinstance(module, nn.LSTM):
                    module.dropout = 0.0
            return model

        cls.build_model = patched  # type: ignore[method-assign]


def full_parameters(trainer: Trainer) -> list[list[float]]:
    strategy = trainer.strategy
    # Model-parallel strategies gather the whole model (a collective on every rank).
    model = strategy.full_model() if hasattr(strategy, "full_model") else strategy.model
    found = []
    for parameter in model.parameters():  # type: ignore[union-attr]
        whole = parameter.full_tensor() if hasattr(parameter, "full_tensor") else parameter
        found.append(whole.detach().double().flatten().tolist())
    return found


def lbfgs_step(optimizer: torch.optim.LBFGS, model: torch.nn.Module, loss_fn: Any,
               inputs: torch.Tensor, targets: torch.Tensor) -> float:
    """One torch.optim.LBFGS step on the whole batch; the loss before it."""
    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        return loss

    return float(optimizer.step(closure))


def main() -> None:
    out, workload, *strategies = sys.argv[1:]
    wire = os.environ.get("CHECK_WIRE") == "1"
    who = identity_from_env()  # RANK/WORLD_SIZE, or mpirun's variables
    rank, world = who.rank, who.world_size
    comm = os.environ.get("CHECK_COMM", "gloo")
    meter = CommMeter()
    backend = register_counted_backend(comm, meter)
    if comm == "mpi":
        from harness.comm.mpi_group import init_mpi_process_group

        init_mpi_process_group(backend=backend)
    else:
        dist.init_process_group(backend, rank=rank, world_size=world,
                                timeout=dt.timedelta(seconds=120))
    torch.set_num_threads(1)
    if os.environ.get("CHECK_NO_DROPOUT") == "1":
        without_dropout()
    report = {}
    for entry in strategies:
        name, _, text = entry.partition(":")
        raw = dict(pair.split("=") for pair in text.split(",") if pair)
        single = name in ("single", "lbfgs")  # rank 0 alone, undistributed: a reference
        # lbfgs: torch.optim.LBFGS (max_iter=1, no line search) on the whole batch, which
        # sandblaster's one replica must follow
        lbfgs = name == "lbfgs" and {"history": int(raw.pop("history", 10)),
                                     "lr": float(raw.pop("lr", 1.0))}
        if single:
            name = "ddp"
        batch = int(raw.pop("batch", 4))
        spec = RunSpec(workload=workload, size="tiny", comm="none" if single else comm,
                       nproc_per_node=1 if single else world, batch_per_rank=batch,
                       steps=STEPS, threads=1, strategy=name,
                       strategy_options=STRATEGIES.get(name).parse_options(raw), peak="cached")
        cls = STRATEGIES.get(name)
        if cls.replicas(spec) != world:
            spec = spec.replace(replicas=cls.replicas(spec))
        meter.steps.clear()
        if wire:
            dist.barrier()
            started = (loopback.mark(), meter.total["wire"])
        losses: list[float] = []
        parameters: list[list[float]] = []
        state: dict[str, int] = {}
        if single and rank != 0:
            meter.steps.extend({"gradient": 0} for _ in range(STEPS))
        else:
            trainer = Trainer(spec, rank, rank, meter)
            strategy = trainer.strategy
            if strategy.serves:
                strategy.serve()
                served, rounds = meter.end_step(), strategy.served_rounds()
                meter.steps[:] = [{k: v / rounds for k, v in served.items()}] * STEPS
            else:
                # Each data shard its own batches (the shard, not the rank: the ranks of one
                # pipeline read the same ones, a parameter server's worker 0 what a single
                # rank reads).
                generator = torch.Generator().manual_seed(100 + strategy.data_shard()[0])
                reference = lbfgs and torch.optim.LBFGS(
                    strategy.model.parameters(), lr=lbfgs["lr"], max_iter=1,  # type: ignore[union-attr]
                    history_size=lbfgs["history"])
                for _ in range(STEPS):
                    inputs, targets = trainer.workload.synthetic_batch("tiny", batch, "cpu",
                                                                       generator)
                    inputs, targets = trainer.to_device(inputs, targets)
                    if reference:
                        losses.append(lbfgs_step(reference, strategy.model,  # type: ignore[arg-type]
                                                 trainer.workload.loss, inputs, targets))
                    else:
                        losses.append(float(trainer.step(inputs, targets)))
                    meter.end_step()
                if name == "sandblaster":  # the shards' parameters after the last batch
                    strategy.model_to_evaluate()
                parameters = full_parameters(trainer)
            state = strategy.state_bytes()
            strategy.finish()  # a parameter server's workers say they are done
        if wire:
            dist.barrier()
            ended = (loopback.sent_since(started[0]), meter.total["wire"])
        counted: list[list[dict[str, float]]] = [[] for _ in range(world)]
        dist.all_gather_object(counted, meter.steps)
        if rank == 0:
            report[entry] = {"parameters": parameters, "counted": counted, "losses": losses,
                             "state_bytes": state}
        if wire:
            # Every byte each rank counted between the barriers (set-up, steps, finish), and
            # what the namespace's loopback carried meanwhile (rank 0 reads it for all).
            sent: list[float] = [0.0] * world
            dist.all_gather_object(sent, ended[1] - started[1])
            if rank == 0:
                report[entry]["wire"] = {"counted": sum(sent), "measured": ended[0]}
    if rank == 0:
        Path(out).write_text(json.dumps(report))
    dist.barrier()
    # Every rank's part is complete: gloo can still abort in teardown ("terminate called
    # without an active exception", 1 in ~12 runs of hybrid + gossip at 3 ranks), which the
    # runner, like dtbench's supervisor, does not count against the results.
    print(DONE, flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
