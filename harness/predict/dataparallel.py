"""Step time of the data-parallel strategies: ddp, zero1, fsdp, localsgd, gossip, hogwild.

A measured single-rank step of T seconds is split into forward and backward by the workload's
FLOP shares (T_f = T·forward FLOPs/all FLOPs, T_b = T - T_f). Synchronous strategies take T as
the slowest of their ranks (ComputeCalibration.step). The bytes a rank sends are its strategy
class's traffic() (Context.traffic); times come from the network's α-β costs.
"""
from __future__ import annotations

import math

from harness.predict.context import PARAM_BYTES, Context, NotModelled, StepEstimate
from harness.strategies.ddp import BUCKET_MB, COMPRESSION, compression_ratio
from harness.strategies.fsdp import RESHARD
from harness.strategies.strategy_options import OVERLAP

FIRST_BUCKET_BYTES = 2**20  # DDP closes its first bucket at 1 MiB, so reduction starts early
UNPRICED_FSDP = ("FSDP2's per-unit work (buffer copies, DTensor bookkeeping, hooks) is not "
                 "priced: no single-rank fsdp record (--comm gloo) to measure it")


def gradient_scale(ctx: Context) -> float:
    """Bytes on the wire per fp32 gradient byte under the run's compression hook (ddp's
    compression_ratio)."""
    name = str(ctx.shared_option(COMPRESSION))
    try:
        return compression_ratio(name)
    except NotImplementedError:
        raise NotModelled(f"compression {name!r} is not modelled (only fp16, bf16, none)") \
            from None


def buckets(ctx: Context, scale: float = 1.0) -> list[tuple[float, float]]:
    """DDP's gradient buckets in reduction order: (bytes on the wire, share of the backward
    pass done when the bucket is ready). Layers are taken last to first, as gradients appear;
    a bucket closes once it holds 1 MiB (the first) or bucket_mb MiB (the others) of fp32
    gradients; compression (scale) shrinks what is sent, not the buckets."""
    layers = ctx.facts.layers
    total = sum(layer.backward_flops for layer in layers) or 1
    cap, found, current, done = FIRST_BUCKET_BYTES, [], 0.0, 0
    for layer in reversed(layers):
        done += layer.backward_flops
        if layer.parameters == 0:
            continue
        current += layer.parameters * PARAM_BYTES
        if current >= cap:
            found.append((current * scale, done / total))
            cap, current = float(ctx.shared_option(BUCKET_MB)) * 2**20, 0.0
    if current > 0:
        found.append((current * scale, 1.0))
    return found


def _ready(ctx: Context, backward: float) -> list[tuple[float, float]]:
    """(seconds into the backward pass, fp32 bytes) of each layer's gradient, in the order
    the backward pass frees them (last layer first)."""
    layers = ctx.facts.layers
    total = sum(layer.backward_flops for layer in layers) or 1
    found, done = [], 0.0
    for layer in reversed(layers):
        done += layer.backward_flops
        if layer.parameters:
            found.append((done / total * backward, layer.parameters * PARAM_BYTES))
    return found


def fused_allreduce(ctx: Context, ranks: int, backward: float, scale: float = 1.0
                    ) -> tuple[float, float]:
    """Horovod's tensor fusion instead of DDP's buckets (ctx.fusion = (threshold bytes, cycle
    seconds)), as its background loop runs: a cycle takes every gradient ready by then, fuses
    it into allreduces of at most the threshold, runs them in turn, and the next cycle starts
    a cycle after this one began or when its allreduces end, whichever is later (so slow
    allreduces make larger buffers). Returns (end of the backward phase, seconds of
    allreduce); overlap=0 starts the first cycle when the backward pass ends."""
    threshold, cycle = ctx.fusion or (float("inf"), 0.0)
    ready = _ready(ctx, backward)
    overlap = bool(ctx.shared_option(OVERLAP))
    clock, busy, taken, began = (0.0 if overlap else backward), 0.0, 0, -math.inf
    while taken < len(ready):
        # a cycle after the last one began, once its allreduces ended and a gradient is ready
        clock = max(clock, began + cycle, ready[taken][0])
        began, waiting = clock, 0.0
        while taken < len(ready) and ready[taken][0] <= clock:
            waiting += ready[taken][1]
            taken += 1
        count = max(1, math.ceil(waiting / threshold))
        for _ in range(count):
            took = ctx.network.time("allreduce", waiting / count * scale, ranks)
            busy += took
            clock += took
    return max(backward, clock), busy


def overlapped_allreduce(ctx: Context, ranks: int, backward: float, scale: float = 1.0
                         ) -> tuple[float, float]:
    """(end of the backward phase, seconds of allreduce) with buckets reduced one after
    another as soon as they are ready: end = max(T_b, the last bucket's allreduce end);
    without overlap (option overlap=0) end = T_b + the sum of the allreduces. With ctx.fusion,
    Horovod's fusion instead (fused_allreduce)."""
    if ctx.fusion:
        return fused_allreduce(ctx, ranks, backward, scale)
    clock, busy = 0.0, 0.0
    overlap = bool(ctx.shared_option(OVERLAP))
    for size, ready in buckets(ctx, scale):
        took = ctx.network.time("allreduce", size, ranks)
        busy += took
        clock = max(clock, ready * backward if overlap else backward) + took
    return max(backward, clock), busy


def _phases(ctx: Context, samples: float, ranks: int) -> tuple[float, float, float]:
    total = ctx.compute_time(samples, ranks)
    forward = total * ctx.facts.forward_fraction
    return total, forward, total - forward


def ddp(ctx: Context, nodes: int) -> StepEstimate:
    """step = T_f + max(T_b, end of the bucketed gradient allreduce), the buckets reduced as
    the backward pass frees them (the last bucket's allreduce is the tail that cannot hide)."""
    scale = gradient_scale(ctx)
    samples = ctx.rank_batch(nodes)
    total, forward, backward = _phases(ctx, samples, nodes)
    end, busy = overlapped_allreduce(ctx, nodes, backward, scale)
    return StepEstimate(forward + end, samples * nodes, total, {"allreduce (gradient)": busy},
                        ctx.traffic(nodes))


def zero1(ctx: Context, nodes: int) -> StepEstimate:
    """ddp's step, then after the optimizer step every rank broadcasts its shard (P/n) of the
    updated parameters: + n · broadcast(P/n), not overlapped; + ZeroRedundancyOptimizer's own
    per-step work where a single-rank zero1 run measured it."""
    step = ddp(ctx, nodes)
    shards = nodes * ctx.network.time("broadcast", ctx.facts.param_bytes / nodes, nodes)
    comm = {**step.comm, "broadcast (parameter)": shards}
    return ctx.with_overhead(StepEstimate(
        step.step_time + shards, step.samples_per_step, step.compute_time, comm,
        ctx.traffic(nodes), ("the optimizer's own time is not divided by n",)))


def _units(ctx: Context) -> list[float]:
    """Parameter bytes of each FSDP unit: the workload's blocks that hold parameters."""
    sizes: dict[str, float] = {}
    for layer in ctx.facts.layers:
        if layer.parameters:
            sizes[layer.block] = sizes.get(layer.block, 0.0) + layer.parameters * PARAM_BYTES
    return list(sizes.values())


def fsdp_exchange(ctx: Context, forward: float, backward: float, units: list[float],
                  ranks: int) -> tuple[float, float, dict[str, float]]:
    """(forward phase, backward phase, seconds by collective) of FSDP2 over `ranks` with
    `units` bytes per unit: prefetching hides all but the first unit's gather and the last
    reduce-scatter (fsdp's rule, which fsdp-tp shares over its dp dimension)."""
    units = units or [0.0]
    gather = [ctx.network.time("allgather", size, ranks) for size in units]
    scatter = [ctx.network.time("reducescatter", size, ranks) for size in units]
    reshard = bool(ctx.shared_option(RESHARD))
    hidden = (sum(gather[:-1]) if reshard else 0.0) + sum(scatter[1:])
    if bool(ctx.shared_option(OVERLAP)):
        step_forward = gather[0] + max(forward, sum(gather[1:]))
        step_backward = (gather[-1] if reshard else 0.0) + max(backward, hidden) + scatter[0]
    else:
        step_forward = forward + sum(gather)
        step_backward = backward + (gather[-1] if reshard else 0.0) + hidden + scatter[0]
    return step_forward, step_backward, {
        "allgather (parameter)": sum(gather) * (2 if reshard else 1),
        "reducescatter (gradient)": sum(scatter)}


def fsdp(ctx: Context, nodes: int) -> StepEstimate:
    """FSDP2 with one unit per block. forward = AG(first unit) + max(T_f, AG(other units));
    backward = [AG(last unit)] + max(T_b, [AG(other units)] + RS(all but the first unit))
    + RS(first unit): prefetching hides all but the first gather and the last reduce-scatter.
    Gathers in the backward pass only when reshard_after_forward (the default). Without
    overlap (option overlap=0): forward = T_f + ΣAG, backward = T_b + [ΣAG] + ΣRS. + FSDP2's own
    per-step work (copies into and out of the flat all-gather buffers, DTensor bookkeeping,
    hooks) as a single-rank fsdp run measured it (harness.predict.overhead); without such a
    run it is not priced, and a note says so."""
    samples = ctx.rank_batch(nodes)
    total, forward, backward = _phases(ctx, samples, nodes)
    step_forward, step_backward, comm = fsdp_exchange(ctx, forward, backward, _units(ctx),
                                                      nodes)
    return ctx.with_overhead(StepEstimate(
        step_forward + step_backward, samples * nodes, total, comm, ctx.traffic(nodes)),
        missing=UNPRICED_FSDP)


def localsgd(ctx: Context, nodes: int) -> StepEstimate:
    """Local steps at the single-rank pace, plus the parameter allreduce every H=period steps
    (per-step mean allreduce(P, n)/H) and, with subgroup s > 1, ddp's overlapped gradient
    allreduce inside the subgroup."""
    period, subgroup = int(ctx.option("period")), int(ctx.option("subgroup"))
    if nodes % subgroup:
        raise NotModelled(f"subgroup {subgroup} does not divide {nodes} ranks")
    samples = ctx.rank_batch(nodes)
    total, forward, backward = _phases(ctx, samples, subgroup)
    end, busy = overlapped_allreduce(ctx, subgroup, backward)
    average = ctx.network.time("allreduce", ctx.facts.param_bytes, nodes) / period
    comm = {"allreduce (parameter)": average, "allreduce (gradient)": busy}
    return StepEstimate(forward + end + average, samples * nodes, total, comm,
                        ctx.traffic(nodes),
                        ("ranks meet only every H steps: per-step jitter is not added",))


def gossip(ctx: Context, nodes: int) -> StepEstimate:
    """Each rank waits for its (up to) two ring neighbours and sends them its parameters:
    step = T (slowest of 3) + neighbours · (α + P·β), not overlapped."""
    peers = min(int(ctx.option("neighbours")), nodes - 1)
    samples = ctx.rank_batch(nodes)
    total = ctx.compute_time(samples, min(nodes, peers + 1))
    send = peers * ctx.network.time("p2p", ctx.facts.param_bytes, 2)
    return StepEstimate(total + send, samples * nodes, total, {"p2p (parameter)": send},
                        ctx.traffic(nodes))


def hogwild(ctx: Context, nodes: int) -> StepEstimate:
    """n processes updating one shared model on one node, each at the calibrated per-rank
    pace, nothing on the network."""
    samples = ctx.rank_batch(nodes)
    total = ctx.compute_time(samples)
    return StepEstimate(total, samples * nodes, total, {}, ctx.traffic(nodes),
                        ("one node: contention for memory bandwidth and the shared model's "
                         "cache lines is not modelled",))
