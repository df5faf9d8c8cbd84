"""Step time of the model-parallel strategies: pipeline, tensor and dp-tp.

Activation sizes come from the workload's layer table (workloads.layers): the output of the
last layer before each pipeline cut, the shapes of the fully connected layers that tensor
parallelism splits (the strategies' own tp_plan). Activation bytes per element follow the
precision (volumes.activation_bytes); the bytes a rank sends are its class's traffic().
"""
from __future__ import annotations

from harness.predict.context import PARAM_BYTES, Context, NotModelled, StepEstimate
from harness.strategies.pipeline_stages import SCHEDULES, chunks_per_rank
from harness.strategies.tensor import tp_plan
from harness.strategies.volumes import TPLayer, tp_layer_collectives
from workloads.layers import balance_stages, block_table

SPLIT_KINDS = ("CausalAttention",)  # layers without weights whose work splits by heads


def pipeline(ctx: Context, nodes: int) -> StepEstimate:
    """p = n ranks, M microbatches, v chunks per rank (interleaved-1f1b; 1 otherwise), pv
    stages balanced by FLOPs over the blocks. With T the whole batch's compute on one rank
    and s the slowest stage's FLOP share:

    step = (M·v + p - 1) · (T·s/M + 2·t_x), t_x = α + (B/M)·a_cut·β over the largest cut;
    bubble = (p - 1)/(M·v + p - 1). GPipe and 1F1B take the same time (they differ in memory).
    A run's `stages` must then be p·v: the model prices one pipeline over all ranks.
    """
    schedule = str(ctx.option("schedule"))
    if schedule not in SCHEDULES:
        raise NotModelled(f"unknown schedule {schedule!r}; choose from {', '.join(SCHEDULES)}")
    micro = int(ctx.option("microbatches"))
    chunks = int(ctx.option("chunks")) or chunks_per_rank(schedule)
    stages = int(ctx.option("stages"))
    if stages and stages != nodes * chunks:
        raise NotModelled(f"stages={stages} is not {chunks} per rank at {nodes} ranks (the model "
                          "prices one pipeline over all ranks)")
    units = block_table(ctx.facts.layers)
    if nodes * chunks > len(units):
        raise NotModelled(f"cannot cut {len(units)} blocks into {nodes * chunks} pipeline stages")
    sizes = balance_stages([float(u.flops) for u in units], nodes * chunks)
    ends = [sum(sizes[: k + 1]) - 1 for k in range(len(sizes))]
    total_flops = sum(u.flops for u in units) or 1
    starts = [end - size + 1 for end, size in zip(ends, sizes, strict=True)]
    shares = [sum(u.flops for u in units[s:e + 1]) / total_flops
              for s, e in zip(starts, ends, strict=True)]
    cuts = [units[end].output_elements * ctx.element_bytes for end in ends[:-1]]
    batch = ctx.batch
    whole = ctx.compute_time(batch, nodes)
    transfer = max((ctx.network.time("p2p", cut * batch / micro, 2) for cut in cuts),
                   default=0.0) if nodes > 1 else 0.0
    slots = micro * chunks + nodes - 1
    step = slots * (whole * max(shares) / micro + 2 * transfer)
    busiest = max(sum(shares[k] for k in range(rank, len(shares), nodes)) for rank in
                  range(nodes))
    return StepEstimate(step, batch, whole * busiest, {"p2p (activation)": slots * 2 * transfer},
                        ctx.traffic(nodes, batch), bubble=(nodes - 1) / slots)


def _split_layers(ctx: Context, batch_sharded_input: bool) -> list[TPLayer]:
    """The layers a run splits (tensor.tp_plan over the model's layer table: a dtbench
    workload's plan, its vocabulary embedding included; a model read for its facts only,
    its chain of FC layers)."""
    if not ctx.facts.linear_layers:
        raise NotModelled(f"{ctx.facts.workload} has no fully connected layer to split")
    return tp_plan(ctx.facts.workload, ctx.facts.size, batch_sharded_input, ctx.facts.layers)[1]


def _tp_comm(ctx: Context, layers: list[TPLayer], batch: float, tp: int) -> float:
    return sum(ctx.network.time(op, payload, tp) for layer in layers
               for op, payload in tp_layer_collectives(layer, int(round(batch)),
                                                       ctx.element_bytes))


def _fc_share(ctx: Context) -> float:
    """The FLOP share the tp ranks divide: the FC layers' and, in a transformer, attention's
    (each rank computes its own heads)."""
    total = ctx.facts.flops_per_sample or 1
    return sum(layer.flops for layer in ctx.facts.layers
               if layer.in_features is not None or layer.kind in SPLIT_KINDS) / total


def tensor(ctx: Context, nodes: int) -> StepEstimate:
    """tp = n ranks see the same batch: the FC layers' compute is divided by tp, the rest is
    replicated; each split layer's collectives (volumes.tp_layer_collectives) are added,
    not overlapped: step = T·(1 - f) + T·f/tp + Σ collectives (f: the FC layers' FLOP share)
    + DTensor's own per-step work where a single-rank tensor run measured it."""
    layers = _split_layers(ctx, batch_sharded_input=False)
    whole = ctx.compute_time(ctx.batch, nodes)
    share = _fc_share(ctx)
    compute = whole * (1 - share) + whole * share / nodes
    comm = _tp_comm(ctx, layers, ctx.batch, nodes)
    return ctx.with_overhead(StepEstimate(
        compute + comm, ctx.batch, compute, {"tensor-parallel (activation)": comm},
        ctx.traffic(nodes, ctx.batch)))


def dp_tp(ctx: Context, nodes: int) -> StepEstimate:
    """A dp × tp mesh (Krizhevsky 2014): each rank computes its batch b through the dense
    layers and 1/tp of the FC layers for the tp·b samples of its group (= T(b)); then, not
    overlapped, the dense gradients' allreduce over n, the FC shards' allreduce over dp, and
    the FC activations' collectives inside the group."""
    tp = int(ctx.option("tp"))
    if tp < 1 or nodes % tp:
        raise NotModelled(f"tp={tp} does not divide {nodes} ranks")
    layers = _split_layers(ctx, batch_sharded_input=True)
    samples = ctx.rank_batch(nodes)
    compute = ctx.compute_time(samples, nodes)
    split = sum(layer.parameters for layer in layers) * PARAM_BYTES
    dense = max(0.0, ctx.facts.param_bytes - split)
    comm = {"allreduce (gradient)": ctx.network.time("allreduce", dense, nodes)
            + ctx.network.time("allreduce", split / tp, nodes // tp),
            "tensor-parallel (activation)": _tp_comm(ctx, layers, tp * samples, tp)}
    return StepEstimate(compute + sum(comm.values()), samples * nodes, compute, comm,
                        ctx.traffic(nodes, samples))


def fsdp_tp(ctx: Context, nodes: int) -> StepEstimate:
    """A dp × tp mesh (TorchTitan's FSDP2 + tensor parallelism): each tp group computes its
    batch b with the split layers' work divided by tp (= T(b)·(1 - f + f/tp)); inside the
    group the split layers' collectives, not overlapped; over dp, fsdp's exchange of the
    bytes a rank holds (its shards of the split layers, the rest whole), overlapped as
    fsdp's (dataparallel.fsdp_exchange)."""
    from harness.predict.dataparallel import _units, fsdp_exchange
    from harness.strategies.fsdp_tp import held_parameters

    tp = int(ctx.option("tp"))
    if tp < 1 or nodes % tp:
        raise NotModelled(f"tp={tp} does not divide {nodes} ranks")
    dp = nodes // tp
    layers = _split_layers(ctx, batch_sharded_input=False)
    samples = ctx.rank_batch(dp)
    whole = ctx.compute_time(samples, nodes)
    share = _fc_share(ctx)
    compute = whole * (1 - share) + whole * share / tp
    local = PARAM_BYTES * held_parameters(ctx.facts.workload, ctx.facts.size, tp,
                                          ctx.facts.layers)[0]
    forward = compute * ctx.facts.forward_fraction
    scale = local / ctx.facts.param_bytes if ctx.facts.param_bytes else 0.0
    step_forward, step_backward, comm = fsdp_exchange(
        ctx, forward, compute - forward, [size * scale for size in _units(ctx)], dp)
    comm["tensor-parallel (activation)"] = _tp_comm(ctx, layers, samples, tp)
    return StepEstimate(step_forward + step_backward + comm["tensor-parallel (activation)"],
                        samples * dp, compute, comm, ctx.traffic(nodes, samples),
                        ("FSDP2's per-unit work is not priced: fsdp-tp has no single-rank "
                         "run to measure it",))
