"""Analytic bytes each rank sends per training step, by kind, for every strategy
(docs/spec/strategies.md).

One place for the formulas that the byte counters are checked against, that the tests compute
by hand and that `dtbench predict` prices with α-β costs. Pure arithmetic: no
torch.distributed. Per-collective volumes come from `harness.facts.traffic` (ring, or
halving/doubling, which move the same bytes; where a backend runs a collective otherwise, its
wire_bytes: the functions with collectives that differ take a `backend`); P is the parameter
bytes as trained, n the world size.

One element size rule for every strategy, read by the classes' traffic() and by predict's
timing alike: parameters and gradients move as fp32 (PARAM_BYTES: master weights, DDP's and
FSDP2's gradient buffers, the servers' shards; a compression hook shrinks the gradient, see
ddp.compression_ratio); activations and their gradients move at the run's precision
(activation_bytes: autocast computes the layers that produce them in bf16/fp16). One header
rule: a message's protocol header (harness/comm/paramserver.HEADER_BYTES, Sandblaster's
commands) counts in the bytes a rank sends (control); its time is the α every message pays.

Every function takes (param_bytes, world_size, *, options) and returns a dict keyed by
KINDS. Strategies whose ranks differ (parameter servers, pipeline stages) take a `role`
(or `stage`); the default "mean" is the mean over all ranks, which is what a per-rank
average of counted bytes shows. Which function a strategy's bytes come from, and with which
of its options, is said once, by its class's `traffic` (there is no table of them by name).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness.facts.traffic import mean_sent_bytes, sent_bytes, wire_bytes

KINDS = ("gradient", "parameter", "activation", "control")
Volumes = dict[str, float]
PARAM_BYTES = 4  # an fp32 parameter or gradient element
ELEMENT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}  # by precision (harness.spec.specs.PRECISIONS)


def activation_bytes(precision: str) -> int:
    """Bytes of one activation element on the wire at `precision` (4 for fp32)."""
    return ELEMENT_BYTES.get(precision, PARAM_BYTES)


def by_kind(gradient: float = 0.0, parameter: float = 0.0, activation: float = 0.0,
            control: float = 0.0) -> Volumes:
    """A volume dict with every kind present (zeros where nothing moves)."""
    return {"gradient": float(gradient), "parameter": float(parameter),
            "activation": float(activation), "control": float(control)}


def total(volumes: Volumes) -> float:
    """All kinds together."""
    return sum(volumes.values())


def ddp(param_bytes: float, world_size: int) -> Volumes:
    """DistributedDataParallel: gradient = allreduce(P) = 2(n-1)/n · P."""
    return by_kind(gradient=sent_bytes("allreduce", param_bytes, world_size))


def zero1(param_bytes: float, world_size: int, *, gradient_ratio: float = 1.0) -> Volumes:
    """ZeRO-1: gradient allreduce 2(n-1)/n · P (times the compression hook's ratio); each rank
    then broadcasts its updated shard (P/n) to the others, n broadcasts: parameter =
    n · mean_broadcast(P/n) = (n-1)/n · P."""
    n = world_size
    shards = n * mean_sent_bytes("broadcast", param_bytes / max(n, 1), n)
    return by_kind(gradient=sent_bytes("allreduce", param_bytes * gradient_ratio, n),
                   parameter=shards)


def fsdp(param_bytes: float, world_size: int, *, reshard_after_forward: bool = True,
         backend: str = "", root_bytes: float = 0.0) -> Volumes:
    """FSDP2: gradient = reduce-scatter (n-1)/n · P (gloo runs it as an allreduce,
    2(n-1)/n · P: traffic.wire_bytes); parameter = all-gather (n-1)/n · P in the
    forward pass, and again in the backward pass when parameters were freed after the
    forward (reshard_after_forward=True, FSDP2's default): 2(n-1)/n · P, less the R bytes
    of the root unit, which FSDP2 keeps gathered for backward (a tied weight's unit)."""
    again = param_bytes - root_bytes if reshard_after_forward else 0.0
    return by_kind(gradient=wire_bytes("reducescatter", param_bytes, world_size, backend),
                   parameter=sent_bytes("allgather", param_bytes + again, world_size))


def localsgd(param_bytes: float, world_size: int, *, period: int, subgroup: int = 1) -> Volumes:
    """Local SGD after its warm-up: parameters averaged over all n ranks every H=period steps,
    per-step mean parameter = 2(n-1)/n · P / H; gradients allreduced inside a subgroup of
    size s every step (post-local-SGD hook), gradient = 2(s-1)/s · P (0 for s = 1)."""
    if period < 1:
        raise ValueError(f"localsgd period must be >= 1, got {period}")
    return by_kind(gradient=sent_bytes("allreduce", param_bytes, subgroup),
                   parameter=sent_bytes("allreduce", param_bytes, world_size) / period)


def ps_workers(world_size: int, servers: int) -> int:
    """Workers of a parameter-server layout: W = n - K (at least one of each)."""
    if servers < 1 or world_size - servers < 1:
        raise ValueError(f"a parameter server needs K >= 1 servers and at least one worker; "
                         f"got n={world_size}, K={servers}")
    return world_size - servers


def _ps_roles(world_size: int, servers: int, worker: Volumes, server: Volumes,
              role: str, extra: dict[str, tuple[int, Volumes]] | None = None) -> Volumes:
    """The volume of one role, or (role "mean") the mean over all n ranks."""
    roles = {"worker": (ps_workers(world_size, servers), worker), "server": (servers, server)}
    roles.update(extra or {})
    if role in roles:
        return roles[role][1]
    if role != "mean":
        raise ValueError(f"unknown role {role!r}; choose from: mean, {', '.join(roles)}")
    return by_kind(**{kind: sum(count * volume[kind] for count, volume in roles.values())
                      / world_size for kind in KINDS})


def parameter_server(param_bytes: float, world_size: int, *, servers: int = 1,
                     push_every: int = 1, fetch_every: int = 1, header_bytes: float = 0.0,
                     role: str = "mean") -> Volumes:
    """Parameters sharded over K server ranks, W = n - K workers; per step of every worker:

    worker: gradient = P / push_every (P/K to each server); control = header · K ·
    (1/push_every + 1/fetch_every) (a header per push and per fetch request, each server);
    server: parameter = W · (P/K) / fetch_every (its shard back to every worker that
    fetches); control = header · W / fetch_every (one per reply).
    """
    w = ps_workers(world_size, servers)
    worker = by_kind(gradient=param_bytes / push_every,
                     control=header_bytes * servers * (1 / push_every + 1 / fetch_every))
    server = by_kind(parameter=w * param_bytes / servers / fetch_every,
                     control=header_bytes * w / fetch_every)
    return _ps_roles(world_size, servers, worker, server, role)


def ps_sync(param_bytes: float, world_size: int, *, servers: int = 1, header_bytes: float = 0.0,
            role: str = "mean") -> Volumes:
    """Synchronous parameter server: every worker pushes and fetches every step."""
    return parameter_server(param_bytes, world_size, servers=servers, header_bytes=header_bytes,
                            role=role)


def ps_async(param_bytes: float, world_size: int, *, servers: int = 1, header_bytes: float = 0.0,
             role: str = "mean") -> Volumes:
    """Asynchronous parameter server: the same bytes per worker step as ps_sync."""
    return parameter_server(param_bytes, world_size, servers=servers, header_bytes=header_bytes,
                            role=role)


def downpour(param_bytes: float, world_size: int, *, servers: int = 1, n_fetch: int = 1,
             n_push: int = 1, header_bytes: float = 0.0, role: str = "mean") -> Volumes:
    """Downpour SGD (DistBelief): push accumulated gradients every n_push steps, fetch
    parameters every n_fetch steps: worker gradient P/n_push, server parameter
    W·P/(K·n_fetch)."""
    return parameter_server(param_bytes, world_size, servers=servers, push_every=n_push,
                            fetch_every=n_fetch, header_bytes=header_bytes, role=role)


def ssp(param_bytes: float, world_size: int, *, servers: int = 1, staleness: int = 0,
        header_bytes: float = 0.0, role: str = "mean") -> Volumes:
    """Stale synchronous parallel: push and fetch every step like ps_async; the bound s
    changes how long workers wait, not the bytes."""
    del staleness
    return parameter_server(param_bytes, world_size, servers=servers, header_bytes=header_bytes,
                            role=role)


def sandblaster_commands(history: int) -> tuple[int, int]:
    """(commands, reductions) the coordinator sends each shard per batch once the history
    is full (harness/strategies/lbfgs.py): NORMS, SUB, SCALE, DOT(y·s, y·y), SCALE(q),
    2m DOT + 2m AXPY, SCALE(d), COPY, DOT(g·d), AXPY(x), GATHER and PUBLISH: 11 + 4m, of
    which 3 + 2m answer with two numbers."""
    return 11 + 4 * history, 3 + 2 * history


def sandblaster(param_bytes: float, world_size: int, *, servers: int = 1, portions: int = 8,
                history: int = 10, header_bytes: float = 0.0, result_bytes: float = 0.0,
                role: str = "mean") -> Volumes:
    """Sandblaster L-BFGS: W = n - 1 - K replicas, one coordinator, K shards; per batch of N
    portions, with every portion computed once (backup copies add their headers, never a
    gradient: only the kept copy is pushed):

    replicas (all W together): gradient N·P; control headers for W fetches and N pushes to
    each shard, N FINISH and N + W ASK to the coordinator: (W·K + N·K + 2N + W)·header;
    coordinator: control (N VERDICT + N + W ASSIGN)·header + commands(m)·K·header;
    shards (all K together): parameter W·P, control W·K·header + reductions(m)·K·result.
    The roles "worker", "coordinator" and "server" are one rank's share."""
    w = world_size - 1 - servers
    if servers < 1 or w < 1:
        raise ValueError(f"sandblaster needs a replica, a coordinator and K >= 1 shards; "
                         f"got n={world_size}, K={servers}")
    commands, reductions = sandblaster_commands(history)
    n, k, h = portions, servers, header_bytes
    worker = by_kind(gradient=n * param_bytes / w,
                     control=(w * k + n * k + 2 * n + w) * h / w)
    coordinator = by_kind(control=(2 * n + w) * h + commands * k * h)
    server = by_kind(parameter=w * param_bytes / k,
                     control=w * h + reductions * result_bytes)
    roles = {"worker": (w, worker), "coordinator": (1, coordinator), "server": (k, server)}
    if role != "mean":
        if role not in roles:
            raise ValueError(f"unknown role {role!r}; choose from: mean, {', '.join(roles)}")
        return roles[role][1]
    return by_kind(**{kind: sum(count * volume[kind] for count, volume in roles.values())
                      / world_size for kind in KINDS})


def hogwild(param_bytes: float, world_size: int) -> Volumes:
    """HOGWILD!: one model in shared memory on one node: nothing is sent."""
    return by_kind()


def gossip(param_bytes: float, world_size: int, *, neighbours: int = 2,
           header_bytes: float = 0.0) -> Volumes:
    """Gossip averaging on a ring: parameters to each distinct neighbour every step,
    parameter = min(neighbours, n-1) · P (one neighbour when n = 2)."""
    peers = min(neighbours, world_size - 1)
    return by_kind(parameter=peers * param_bytes, control=peers * header_bytes)


def hybrid(param_bytes: float, world_size: int, *, groups: int, servers: int = 1,
           header_bytes: float = 0.0, role: str = "mean") -> Volumes:
    """Kurth et al. 2017: W = n - K workers in G groups of g = W/G (sizes differing by at
    most one when G does not divide W); per step of every group:

    every member: gradient allreduce inside the group 2(g-1)/g · P, then the leader's new
    parameters broadcast to the group, mean (g-1)/g · P (parameter); the leader also pushes
    the group's gradient P to the K servers (control: header · 2K for push and fetch);
    server: parameter = G · P/K (its shard back to every group leader). The roles "worker"
    and "leader" are those of the largest group.
    """
    w = ps_workers(world_size, servers)
    if not 1 <= groups <= w:
        raise ValueError(f"hybrid needs 1 to {w} groups of the {w} workers; got G={groups}")
    sizes = [w // groups + (1 if i < w % groups else 0) for i in range(groups)]

    def member(g: int) -> Volumes:
        return by_kind(gradient=sent_bytes("allreduce", param_bytes, g),
                       parameter=mean_sent_bytes("broadcast", param_bytes, g))

    def leader(g: int) -> Volumes:
        return by_kind(gradient=member(g)["gradient"] + param_bytes,
                       parameter=member(g)["parameter"], control=header_bytes * 2 * servers)

    server = by_kind(parameter=groups * param_bytes / servers, control=header_bytes * groups)
    if role != "mean":
        return _ps_roles(world_size, servers, member(sizes[0]), server, role,
                         {"leader": (groups, leader(sizes[0]))})
    sums = {kind: servers * server[kind] for kind in KINDS}
    for g in sizes:
        for kind in KINDS:
            sums[kind] += (g - 1) * member(g)[kind] + leader(g)[kind]
    return by_kind(**{kind: value / world_size for kind, value in sums.items()})


def pipeline(param_bytes: float, world_size: int, *, cut_bytes: Sequence[float], batch: int,
             chunks: int = 1, microbatches: int = 1, header_bytes: float = 0.0,
             stage: int | None = None) -> Volumes:
    """Pipeline parallelism over p = n ranks with v = chunks model pieces per rank
    (interleaved schedules; v = 1 for GPipe and 1F1B), pv stages, stage k on rank k mod p.

    cut_bytes[k] is the activation bytes per sample crossing the cut after stage k
    (pv - 1 cuts). Per step of `batch` samples, across each cut whose two stages sit on
    different ranks, the activations go forward and their gradients come back: stage k sends
    batch · cut_bytes[k] forward and batch · cut_bytes[k-1] backward (activation kind), in
    microbatches messages each (control: header per message). The schedule changes the
    bubble, not the bytes. `stage` picks a rank; None gives the mean over ranks.
    """
    p = world_size
    if len(cut_bytes) != p * chunks - 1:
        raise ValueError(f"pipeline over {p} ranks x {chunks} chunks has {p * chunks - 1} cuts, "
                         f"got {len(cut_bytes)} cut sizes")
    sent = [0.0] * p
    messages = [0] * p
    for k, size in enumerate(cut_bytes):
        sender, receiver = k % p, (k + 1) % p
        if sender != receiver:
            sent[sender] += batch * size
            sent[receiver] += batch * size
            messages[sender] += microbatches
            messages[receiver] += microbatches
    if stage is None:
        return by_kind(activation=sum(sent) / p, control=header_bytes * sum(messages) / p)
    return by_kind(activation=sent[stage], control=header_bytes * messages[stage])


@dataclass(frozen=True)
class TPLayer:
    """A fully connected layer split across a tensor-parallel group (Megatron style).

    colwise: output features split; rowwise: input features split, output all-reduced.
    positions: rows per sample (35 tokens for the LSTM decoder, 1 for image classifiers);
    input_batch_sharded: the input arrives split by batch (dp-tp, Krizhevsky's trick) and is
    all-gathered; output_replicated: a colwise output all-gathered (the logits).
    """

    in_features: int
    out_features: int
    style: str = "colwise"
    positions: int = 1
    bias: bool = True
    input_batch_sharded: bool = False
    output_replicated: bool = False
    input_requires_grad: bool = True

    @property
    def parameters(self) -> int:
        return self.in_features * self.out_features + (self.out_features if self.bias else 0)


def plan_tp_layers(shapes: Sequence[tuple[int, int, int]], *, batch_sharded_input: bool = False
                   ) -> list[TPLayer]:
    """The usual split of a chain of FC layers (in, out, positions): colwise, rowwise,
    colwise, ...; a chain ending colwise gathers its output (replicated logits)."""
    layers = []
    for index, (fan_in, fan_out, positions) in enumerate(shapes):
        colwise = index % 2 == 0
        layers.append(TPLayer(fan_in, fan_out, "colwise" if colwise else "rowwise", positions,
                              input_batch_sharded=batch_sharded_input and index == 0,
                              output_replicated=colwise and index == len(shapes) - 1))
    return layers


def tp_layer_collectives(layer: TPLayer, batch: int, element_bytes: float = 4
                         ) -> list[tuple[str, float]]:
    """The collectives (op, payload bytes) one split layer runs per step, forward + backward.

    colwise: backward all-reduce of the input gradient, B·in (or, with a batch-sharded input,
    all-gather forward and reduce-scatter backward of B·in); with output_replicated, an
    all-gather of the output B·out forward. rowwise: forward all-reduce of the output B·out.
    B = batch · positions rows (the tensor-parallel group's batch).
    """
    rows = batch * layer.positions
    inputs = rows * layer.in_features * element_bytes
    outputs = rows * layer.out_features * element_bytes
    if layer.style == "rowwise":
        return [("allreduce", outputs)]
    if layer.style != "colwise":
        raise ValueError(f"unknown tensor-parallel style {layer.style!r}; choose colwise or "
                         "rowwise")
    ops = [("allgather", outputs)] if layer.output_replicated else []
    if layer.input_batch_sharded:
        return ops + [("allgather", inputs), ("reducescatter", inputs)]
    return ops + ([("allreduce", inputs)] if layer.input_requires_grad else [])


def tp_layer_bytes(layer: TPLayer, batch: int, tp: int, element_bytes: float = 4,
                   backend: str = "") -> float:
    """Activation bytes one rank sends for one split layer per step (tp_layer_collectives
    over tp ranks, as `backend` runs them)."""
    return sum(wire_bytes(op, payload, tp, backend)
               for op, payload in tp_layer_collectives(layer, batch, element_bytes))


def tensor(param_bytes: float, world_size: int, *, layers: Sequence[TPLayer], batch: int,
           element_bytes: float = 4, backend: str = "") -> Volumes:
    """Tensor parallelism over tp = n ranks that all see the same batch: activation = the sum
    of tp_layer_bytes over the split layers; the replicated layers see identical data, so
    no gradient moves."""
    return by_kind(activation=sum(tp_layer_bytes(layer, batch, world_size, element_bytes,
                                                 backend) for layer in layers))


def dp_tp(param_bytes: float, world_size: int, *, tp: int, layers: Sequence[TPLayer],
          batch_per_rank: int, element_bytes: float = 4, param_element_bytes: float = 4,
          backend: str = "") -> Volumes:
    """A 2-D mesh of dp = n/tp by tp ranks (Krizhevsky 2014): the dense (conv) layers are data
    parallel over all n ranks, gradient allreduce(P_dense, n); the FC layers are split over
    tp and replicated over dp, gradient allreduce(P_fc / tp, dp); their activations move
    inside each tp group, whose batch is tp · batch_per_rank (tp_layer_bytes)."""
    if tp < 1 or world_size % tp:
        raise ValueError(f"dp-tp needs tp to divide the world size; got n={world_size}, tp={tp}")
    split = sum(layer.parameters for layer in layers) * param_element_bytes
    dense = max(0.0, param_bytes - split)
    gradient = sent_bytes("allreduce", dense, world_size) + sent_bytes(
        "allreduce", split / tp, world_size // tp)
    activation = sum(tp_layer_bytes(layer, tp * batch_per_rank, tp, element_bytes, backend)
                     for layer in layers)
    return by_kind(gradient=gradient, activation=activation)


def fsdp_tp(param_bytes: float, world_size: int, *, tp: int, layers: Sequence[TPLayer],
            batch_per_rank: int, local_bytes: float | None = None, root_bytes: float = 0.0,
            reshard_after_forward: bool = True, element_bytes: float = 4,
            backend: str = "") -> Volumes:
    """A 2-D mesh of dp = n/tp by tp ranks (TorchTitan's FSDP2 + tensor parallelism): inside
    each tp group, which shares a batch of batch_per_rank samples, the split layers' activation
    collectives (tp_layer_bytes); over dp, fsdp() of the L bytes a rank of a tp group holds
    (its shards of the split layers, the rest whole; P/tp when not given) and R of them in
    FSDP2's root unit."""
    if tp < 1 or world_size % tp:
        raise ValueError(f"fsdp-tp needs tp to divide the world size; got n={world_size}, "
                         f"tp={tp}")
    local = param_bytes / tp if local_bytes is None else local_bytes
    found = fsdp(local, world_size // tp, reshard_after_forward=reshard_after_forward,
                 backend=backend, root_bytes=root_bytes)
    found["activation"] = sum(tp_layer_bytes(layer, batch_per_rank, tp, element_bytes, backend)
                              for layer in layers)
    return found

