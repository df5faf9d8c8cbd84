"""Step time of the parameter-server strategies (ps-sync, ps-async, downpour, ssp) and of
Kurth et al.'s hybrid: allreduce inside groups, asynchronous exchange with the servers.

K = servers ranks hold the parameters in K shards; the other W = n - K ranks work. One
direction of an exchange (a push of P gradient bytes, or a fetch of P parameter bytes):

- a worker's link carries K messages of P/K: K·α + P·β;
- a server's link carries one message of P/K per client (incast): clients·(α + P/K·β).

Synchronous: everyone waits for the slower of the two. Asynchronous: workers run at their own
pace (T + their own exchange) until the servers saturate; the servers, all working in
parallel, serve at most 1 / (2·(α + P/K·β)) worker steps per second.
"""
from __future__ import annotations

from harness.predict.context import Context, NotModelled, StepEstimate
from harness.predict.dataparallel import overlapped_allreduce
from harness.strategies import STRATEGIES
from harness.strategies.priority import PRIORITY
from harness.strategies.ps import ParameterServerStrategy
from harness.strategies.volumes import sandblaster_commands


def _server_class(ctx: Context) -> type[ParameterServerStrategy]:
    """The class of the strategy priced, which lays out its servers and workers."""
    cls = STRATEGIES.get(ctx.strategy)
    if not issubclass(cls, ParameterServerStrategy):
        raise TypeError(f"strategy {ctx.strategy} has no parameter servers")
    return cls


def _layout(ctx: Context, nodes: int) -> tuple[int, int]:
    """(servers, workers) as the strategy's class lays out `nodes` ranks."""
    cls, run = _server_class(ctx), ctx.run_at(nodes)
    servers, workers = cls.servers(run), cls.workers(run)
    if servers < 1 or workers < 1:
        raise NotModelled(f"needs more than the {servers} server rank(s)")
    return servers, workers


def exchange(ctx: Context, servers: int, clients: int, nbytes: float) -> tuple[float, float]:
    """(client's link, a server's link) seconds for one direction of an exchange."""
    link = ctx.network.link("p2p", 2)
    return (servers * link.alpha + nbytes * link.beta,
            clients * (link.alpha + nbytes / servers * link.beta))


def prioritised_pull(fetch: float, forward: float, layers: int, alpha: float) -> float:
    """A fetch and the forward pass after it, with priority=on: the fetch cut into one piece
    per layer (each an α more), pulled in forward order, each layer's forward starting when
    its piece is in: a two-stage pipeline over L pieces, f + c + (L - 1)·max(f, c) for
    f = fetch/L + α and c = forward/L (layers taken as equal). Off: fetch + forward."""
    if layers <= 1:
        return fetch + forward
    piece, compute = fetch / layers + alpha, forward / layers
    return piece + compute + (layers - 1) * max(piece, compute)


def _priority_saving(ctx: Context, fetch: float, forward: float) -> float:
    """What priority=on takes off a step that fetches (0 with it off)."""
    if not ctx.shared_option(PRIORITY):
        return 0.0
    layers = sum(1 for layer in ctx.facts.layers if layer.parameters)
    alpha = ctx.network.link("p2p", 2).alpha
    return fetch + forward - prioritised_pull(fetch, forward, layers, alpha)


def ps_sync(ctx: Context, nodes: int) -> StepEstimate:
    """step = T (slowest of W) + push + fetch, each max(K·α + P·β, W·(α + P/K·β)); with
    priority the fetch overlaps the forward pass (prioritised_pull)."""
    servers, workers = _layout(ctx, nodes)
    samples = ctx.rank_batch(workers)
    total = ctx.compute_time(samples, workers)
    client, server = exchange(ctx, servers, workers, ctx.facts.param_bytes)
    one_way = max(client, server)
    notes = ("server incast: the servers' links, not the workers', set the exchange",) \
        if server > client else ()
    saving = _priority_saving(ctx, one_way, total * ctx.facts.forward_fraction)
    return StepEstimate(total + 2 * one_way - saving, samples * workers, total,
                        {"push (gradient)": one_way, "fetch (parameter)": one_way},
                        ctx.traffic(nodes), notes)


def _asynchronous(ctx: Context, nodes: int, push_every: int, fetch_every: int
                  ) -> StepEstimate:
    """Workers cycle in T + (K·α + P·β)·(1/push_every + 1/fetch_every); the servers serve
    at most 1 / ((α + P/K·β)·(1/push_every + 1/fetch_every)) worker steps per second; the
    step is the mean time between one worker's steps, W / min(W / cycle, capacity)."""
    servers, workers = _layout(ctx, nodes)
    samples = ctx.rank_batch(workers)
    total = ctx.compute_time(samples)
    client, server_per_client = exchange(ctx, servers, 1, ctx.facts.param_bytes)
    share = 1 / push_every + 1 / fetch_every
    cycle = total + client * share - _priority_saving(
        ctx, client, total * ctx.facts.forward_fraction) / fetch_every
    capacity = 1 / (server_per_client * share) if server_per_client > 0 else float("inf")
    rate = min(workers / cycle, capacity)
    step = workers / rate
    comm = {"push (gradient)": client / push_every, "fetch (parameter)": client / fetch_every}
    notes: tuple[str, ...] = ()
    if step > cycle * (1 + 1e-9):
        comm["server queue (incast)"] = step - cycle
        notes = (f"server-bound: {servers} server(s) serve {capacity:.4g} worker steps/s",)
    return StepEstimate(step, samples * workers, total, comm, ctx.traffic(nodes), notes)


def ps_async(ctx: Context, nodes: int) -> StepEstimate:
    """Push and fetch every step, applied on arrival (see _asynchronous)."""
    return _asynchronous(ctx, nodes, 1, 1)


def downpour(ctx: Context, nodes: int) -> StepEstimate:
    """Push every n_push, fetch every n_fetch steps (see _asynchronous)."""
    run = ctx.run_at(nodes)
    cls = _server_class(ctx)
    return _asynchronous(ctx, nodes, cls.push_every(run), cls.fetch_every(run))


def ssp(ctx: Context, nodes: int) -> StepEstimate:
    """As ps-async: the staleness bound s only makes fast workers wait for stragglers, which
    identical ranks do not have."""
    step = _asynchronous(ctx, nodes, 1, 1)
    return StepEstimate(step.step_time, step.samples_per_step, step.compute_time, step.comm,
                        step.volumes, (*step.notes, "the staleness bound is not modelled"))


def hybrid(ctx: Context, nodes: int) -> StepEstimate:
    """G groups of g = ⌈W/G⌉ workers. A group's cycle: T_f + max(T_b, bucketed allreduce in the
    group) + the leader's push and fetch (2·(K·α + P·β)) + broadcast(P, g) of the new
    parameters. Groups run asynchronously; the servers serve at most 1 / (2·(α + P/K·β))
    group steps per second; step = G / min(G / cycle, capacity)."""
    servers, workers = _layout(ctx, nodes)
    # one leader per group pushes (the class's pushers); the model allows uneven groups
    groups = _server_class(ctx).pushers(ctx.run_at(nodes))
    if not 1 <= groups <= workers:
        raise NotModelled(f"{workers} workers do not make {groups} groups")
    size = -(-workers // groups)  # the largest group sets the pace of a group step
    samples = ctx.rank_batch(workers)
    total = ctx.compute_time(samples, size)
    forward = total * ctx.facts.forward_fraction
    end, allreduce = overlapped_allreduce(ctx, size, total - forward)
    client, server_per_group = exchange(ctx, servers, 1, ctx.facts.param_bytes)
    broadcast = ctx.network.time("broadcast", ctx.facts.param_bytes, size)
    cycle = forward + end + 2 * client + broadcast
    capacity = 1 / (2 * server_per_group) if server_per_group > 0 else float("inf")
    step = groups / min(groups / cycle, capacity)
    comm = {"allreduce in group (gradient)": allreduce, "push (gradient)": client,
            "fetch (parameter)": client, "broadcast in group (parameter)": broadcast}
    notes: tuple[str, ...] = (f"groups of {workers // groups} and {size} workers",) \
        if workers % groups else ()
    if step > cycle * (1 + 1e-9):
        comm["server queue (incast)"] = step - cycle
        notes += (f"server-bound: {servers} server(s) serve {capacity:.4g} group steps/s",)
    return StepEstimate(step, samples * workers, total, comm, ctx.traffic(nodes), notes)


def sandblaster(ctx: Context, nodes: int) -> StepEstimate:
    """Sandblaster L-BFGS, W = n - 1 - K replicas sharing one batch B cut into N portions.
    step = fetch + max(⌈N/W⌉·(t(B/N) + 4α + K·α + P·β), N·(α + P/K·β)) + L-BFGS + 2α:
    the fetch as ps-sync's (max of the replica's and the shards' links), each portion its
    compute, two round trips to the coordinator and the push, bounded by the shards' links
    taking every portion's push; the L-BFGS iteration (11 + 4m)·K·α for its commands plus
    (3 + 2m)·K·α for the answers of its reductions. The shards' vector operations (memory
    passes over P/K floats) and stragglers' backup copies are not priced."""
    cls = STRATEGIES.get(ctx.strategy)
    run = ctx.run_at(nodes)
    servers, workers = cls.servers(run), cls.workers(run)  # type: ignore[attr-defined]
    if workers < 1:
        raise NotModelled(f"needs a replica beside the coordinator and {servers} shard(s)")
    portions, history = int(ctx.option("portions")), int(ctx.option("history"))
    link = ctx.network.link("p2p", 2)
    param_bytes = ctx.facts.param_bytes
    batch = ctx.batch
    portion = ctx.compute_time(batch / portions, workers)
    per_replica = -(-portions // workers)
    client, server = exchange(ctx, servers, workers, param_bytes)
    fetch = max(client, server)
    pushes = max(per_replica * (4 * link.alpha + servers * link.alpha + param_bytes * link.beta),
                 portions * (link.alpha + param_bytes / servers * link.beta))
    commands, reductions = sandblaster_commands(history)
    lbfgs = (commands + reductions) * servers * link.alpha
    compute = per_replica * portion
    step = fetch + compute + pushes + lbfgs + 2 * link.alpha
    notes = ("the shards' vector operations and backup copies are not priced",)
    return StepEstimate(step, batch, compute,
                        {"fetch (parameter)": fetch, "portions: coordinator and push": pushes,
                         "L-BFGS commands": lbfgs},
                        ctx.traffic(nodes), notes)
