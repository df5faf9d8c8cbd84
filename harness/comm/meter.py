"""Bytes counted where they are sent: a process group that wraps the real one (gloo, NCCL, or
the MPI group of harness/comm/mpi_group.py) and counts every collective and point-to-point call a
rank makes, whoever makes it: DDP's reducer, FSDP2, ZeroRedundancyOptimizer, DTensor's
functional collectives, pipelining's send/recv, a parameter server's own messages.

For each call the wrapper keeps two figures: the payload (the bytes of the tensors the caller
handed to the collective, measured here) and the bytes this rank puts on the wire, which follow
from the algorithm the backend runs for that collective (harness/facts/traffic.wire_bytes:
verified at the socket for gloo and MPI; exact for point-to-point). Traffic outside the
training steps (set-up, evaluation, the stop decision, result gathering) is filed apart under
its phase (`meter.outside(phase)`), never in a step's count. Each call is filed under a kind
(gradient, parameter, activation, control): the innermost `meter.kind(...)` a strategy opened,
else the kind its group was labelled with, else the collective's usual kind (allreduce and
reduce-scatter carry gradients, all-gather parameters, send/recv activations, the rest
control)."""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from harness.comm.inner import COUNTED
from harness.comm.p2p import install_batched_p2p
from harness.facts.traffic import wire_bytes

KINDS = ("gradient", "parameter", "activation", "control")
DEFAULT_KINDS = {"allreduce": "gradient", "reducescatter": "gradient", "allgather": "parameter",
                 "send": "activation", "recv": "activation", "broadcast": "control",
                 "scatter": "control", "gather": "control", "reduce": "control",
                 "alltoall": "activation", "barrier": "control"}


@dataclass
class CommMeter:
    """Bytes this rank sent, per step and kind (on the wire) and per step (payload), traffic
    outside the steps by phase, and how many calls of each collective."""

    steps: list[dict[str, int]] = field(default_factory=list)
    payload_steps: list[int] = field(default_factory=list)
    outside_steps: dict[str, dict[str, int]] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    # Everything counted since the meter was made, steps and outside them alike.
    total: dict[str, float] = field(default_factory=lambda: {"payload": 0.0, "wire": 0.0})
    _current: dict[str, float] = field(default_factory=dict)
    _current_payload: float = 0.0
    _kinds: threading.local = field(default_factory=threading.local)
    _group_kinds: dict[int, str] = field(default_factory=dict)
    _phase: str | None = None

    @contextlib.contextmanager
    def kind(self, kind: str) -> Iterator[None]:
        """File every call made inside the block (in this thread) under `kind`."""
        if kind not in KINDS:
            raise ValueError(f"unknown traffic kind {kind!r}; known: {', '.join(KINDS)}")
        stack = self._stack()
        stack.append(kind)
        try:
            yield
        finally:
            stack.pop()

    def label_group(self, group: Any, kind: str) -> None:
        """File calls on `group` (a process group or DeviceMesh dimension) under `kind`."""
        self._group_kinds[id(group)] = kind

    def _stack(self) -> list[str]:
        if not hasattr(self._kinds, "stack"):
            self._kinds.stack = []
        return self._kinds.stack  # type: ignore[no-any-return]

    @contextlib.contextmanager
    def outside(self, phase: str) -> Iterator[None]:
        """Count every call made inside the block under `phase` (evaluation, stop, ...), apart
        from the training steps; what the current step counted so far stays in it."""
        before, self._phase = self._phase, phase
        try:
            yield
        finally:
            self._phase = before

    def add(self, op: str, payload: float, wire: float, group: Any) -> None:
        """One call: its payload and this rank's wire bytes."""
        self.calls[op] = self.calls.get(op, 0) + 1
        self.total["payload"] += payload
        self.total["wire"] += wire
        if self._phase is not None:
            self._book_outside(self._phase, payload, wire)
            return
        stack = self._stack()
        kind = (stack[-1] if stack else self._group_kinds.get(id(group))
                or DEFAULT_KINDS.get(op, "control"))
        self._current[kind] = self._current.get(kind, 0.0) + wire
        self._current_payload += payload

    def _book_outside(self, phase: str, payload: float, wire: float) -> None:
        booked = self.outside_steps.setdefault(phase, {"payload": 0, "wire": 0})
        booked["payload"] += int(round(payload))
        booked["wire"] += int(round(wire))

    def end_step(self) -> dict[str, int]:
        """Close the step: its wire bytes by kind (every kind present), counted since the last
        (the payload goes to payload_steps)."""
        step = {kind: int(round(self._current.get(kind, 0.0))) for kind in KINDS}
        self.steps.append(step)
        self.payload_steps.append(int(round(self._current_payload)))
        self._current, self._current_payload = {}, 0.0
        return step

    def discard(self, phase: str = "setup") -> None:
        """File what was counted since the last step under `phase` (set-up traffic is no
        step's)."""
        if self._current or self._current_payload:
            self._book_outside(phase, self._current_payload, sum(self._current.values()))
        self._current, self._current_payload = {}, 0.0


def _payload(tensors: Any) -> int:
    if isinstance(tensors, torch.Tensor):
        return tensors.numel() * tensors.element_size()
    return sum(_payload(t) for t in tensors)


class CountingProcessGroup(dist.ProcessGroup):
    """A process group that counts what this rank sends, then lets the wrapped one send it."""

    def __init__(self, inner: Any, rank: int, size: int, meter: CommMeter,
                 backend_name: str, comm: str, store: Any = None) -> None:
        super().__init__(rank, size)
        self._store = store  # the group's store, which a split (split_group below) needs
        self._comm = comm
        self._inner = inner
        self._rank = rank
        self._size = size
        self._meter = meter
        self._backend_name = backend_name
        self._group_name = ""
        if comm == "nccl" and isinstance(inner, torch._C._distributed_c10d.Backend):
            # torch finds a group's devices, its eager NCCL connection and the devices of its
            # object collectives (the ranks' results) through the backends registered on it.
            for device in COUNTED[comm].devices:
                self._register_backend(torch.device(device),
                                       dist.ProcessGroup.BackendType.CUSTOM, inner)

    # -- identity (DeviceMesh and functional collectives look the group up by name) -----------
    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size

    def getBackendName(self) -> str:  # the C++ method's name, which torch dispatches to
        return self._backend_name

    def _get_backend_name(self) -> str:
        return self._backend_name

    def _set_group_name(self, name: str) -> None:
        self._group_name = name

    @property
    def group_name(self) -> str:  # type: ignore[override]
        return self._group_name

    @property
    def inner(self) -> Any:
        return self._inner

    def __repr__(self) -> str:
        return f"CountingProcessGroup({self._inner!r}, rank={self._rank}, size={self._size})"

    # -- groups split from this one -----------------------------------------------------------
    def split_group(self, new_ranks: list[int], timeout: Any = None, opts: Any = None,
                    group_name: str | None = None, group_desc: str | None = None,
                    device_types: Any = None) -> CountingProcessGroup | None:
        """torch's split (torch.distributed.split_group, which DeviceMesh takes for each
        dimension once the default group is bound to a GPU): the C++ ProcessGroup splits the
        wrapped backend (ncclCommSplit), and the split is wrapped in turn, so that its calls
        are counted like every other group's. None on a rank outside every split."""
        given = {"timeout": timeout, "opts": opts, "group_name": group_name,
                 "group_desc": group_desc}
        if device_types is not None:
            given["device_types"] = device_types
        device = self.bound_device_id or torch.device(COUNTED[self._comm].devices[0])
        # The C++ split needs the group's store, which a Python subclass of ProcessGroup cannot
        # be built with: a plain group around the same backend and store splits instead.
        plain = dist.ProcessGroup(self._store, self._rank, self._size)
        plain._register_backend(device, dist.ProcessGroup.BackendType.CUSTOM, self._inner)
        split = plain.split_group(new_ranks, **given)
        if split is None:
            return None
        group = CountingProcessGroup(split._get_backend(device), split.rank(), split.size(),
                                     self._meter, self._backend_name, self._comm,
                                     split.get_group_store())
        group._set_group_name(split.group_name)
        group._set_group_desc(split.group_desc)
        return group

    # -- coalescing (batch_isend_irecv through harness/comm/p2p.py) ---------------------------
    def _start_coalescing(self, device: torch.device) -> None:
        self._inner._start_coalescing(device)

    def _end_coalescing(self, device: torch.device) -> dist.Work:
        return self._inner._end_coalescing(device)

    # -- counting -----------------------------------------------------------------------------
    def _count(self, op: str, payload: int, root: int = 0) -> None:
        self._meter.add(op, payload, wire_bytes(op, payload, self._size, self._comm, self._rank,
                                                root), self)

    def _call(self, names: tuple[str, ...], *args: Any) -> Any:
        """The wrapped group's method under the first of `names` it has; options left out
        when None (the C++ methods default them)."""
        while args and args[-1] is None:
            args = args[:-1]
        for name in names:
            method = getattr(self._inner, name, None)
            if method is not None:
                return method(*args)
        raise NotImplementedError(f"{type(self._inner).__name__} has no {names[0]}")

    # -- reductions ---------------------------------------------------------------------------
    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> dist.Work:
        self._count("allreduce", _payload(tensors))
        return self._call(("allreduce",), tensors, opts)

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any = None) -> dist.Work:
        self._count("allreduce", _payload(tensors))
        return self._call(("allreduce_coalesced",), tensors, opts)

    def reduce(self, tensors: list[torch.Tensor], opts: Any = None) -> dist.Work:
        self._count("reduce", _payload(tensors), getattr(opts, "rootRank", 0))
        return self._call(("reduce",), tensors, opts)

    def reduce_scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]],
                       opts: Any = None) -> dist.Work:
        self._count("reducescatter", _payload(inputs))
        return self._call(("reduce_scatter",), outputs, inputs, opts)

    def reduce_scatter_single(self, output: torch.Tensor, input: torch.Tensor,
                              opts: Any = None) -> dist.Work:
        self._count("reducescatter", _payload(input))
        return self._call(("reduce_scatter_single", "_reduce_scatter_base"), output, input, opts)

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_tensor_coalesced(self, outputs: list[torch.Tensor],
                                        inputs: list[torch.Tensor], opts: Any = None
                                        ) -> dist.Work:
        self._count("reducescatter", _payload(inputs))
        if hasattr(self._inner, "reduce_scatter_tensor_coalesced"):
            return self._call(("reduce_scatter_tensor_coalesced",), outputs, inputs, opts)
        return _AllWork([self._call(("_reduce_scatter_base", "reduce_scatter_single"), out, inp,
                                    opts) for out, inp in zip(outputs, inputs, strict=True)])

    # -- moves --------------------------------------------------------------------------------
    def broadcast(self, tensors: list[torch.Tensor], opts: Any = None) -> dist.Work:
        self._count("broadcast", _payload(tensors), getattr(opts, "rootRank", 0))
        return self._call(("broadcast",), tensors, opts)

    def allgather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor],
                  opts: Any = None) -> dist.Work:
        self._count("allgather", _payload(outputs))
        return self._call(("allgather",), outputs, inputs, opts)

    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor,
                          opts: Any = None) -> dist.Work:
        self._count("allgather", _payload(output))
        return self._call(("all_gather_single", "_allgather_base"), output, input, opts)

    _allgather_base = all_gather_single

    def allgather_into_tensor_coalesced(self, outputs: list[torch.Tensor],
                                        inputs: list[torch.Tensor], opts: Any = None
                                        ) -> dist.Work:
        self._count("allgather", _payload(outputs))
        if hasattr(self._inner, "allgather_into_tensor_coalesced"):
            return self._call(("allgather_into_tensor_coalesced",), outputs, inputs, opts)
        return _AllWork([self._call(("_allgather_base", "all_gather_single"), out, inp)
                         for out, inp in zip(outputs, inputs, strict=True)])

    def alltoall_base(self, output: torch.Tensor, input: torch.Tensor, output_splits: list[int],
                      input_splits: list[int], opts: Any = None) -> dist.Work:
        self._count("alltoall", _payload(input))
        return self._call(("alltoall_base",), output, input, output_splits, input_splits, opts)

    def scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]],
                opts: Any = None) -> dist.Work:
        self._count("scatter", _payload(inputs), getattr(opts, "rootRank", 0))
        return self._call(("scatter",), outputs, inputs, opts)

    def gather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor],
               opts: Any = None) -> dist.Work:
        self._count("gather", _payload(inputs), getattr(opts, "rootRank", 0))
        return self._call(("gather",), outputs, inputs, opts)

    def barrier(self, opts: Any = None) -> dist.Work:
        if self._comm == "nccl":
            # NCCL's barrier is an allreduce on a device: the rank's bound one, not one it
            # guesses from its rank.
            opts = opts if opts is not None else dist.BarrierOptions()
            if not opts.device_ids:
                bound = self.bound_device_id
                opts.device_ids = [bound.index if bound is not None
                                   else torch.cuda.current_device()]
        return self._call(("barrier",), opts)

    # -- point to point -----------------------------------------------------------------------
    def send(self, tensors: list[torch.Tensor], dst: int, tag: int = 0) -> dist.Work:
        self._count("send", _payload(tensors))
        return self._call(("send",), tensors, dst, tag)

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int = 0) -> dist.Work:
        return self._call(("recv",), tensors, src, tag)

    def recv_anysource(self, tensors: list[torch.Tensor], tag: int = 0) -> dist.Work:
        return self._call(("recv_anysource",), tensors, tag)


class _AllWork(dist.Work):
    """Several pending operations as one Work: what a coalesced collective returns when the
    wrapped group (gloo has no coalesced all-gather or reduce-scatter of tensors) runs it
    as one base operation per tensor."""

    def __init__(self, works: list[Any]) -> None:
        super().__init__()
        self._works = works

    def wait(self, timeout: Any = None) -> bool:
        for work in self._works:
            work.wait()
        return True

    def is_completed(self) -> bool:
        return all(work.is_completed() for work in self._works)


@dataclass
class _Target:
    """The meter that groups created from now on count into (torch's backend registry is
    process-wide, so the creator reads it from here rather than from a closure)."""

    meter: CommMeter | None = None
    # the rank's GPU (NCCL): every group created keeps it as its bound device
    device: torch.device | None = None


_TARGET = _Target()


def register_counted_backend(comm: str, meter: CommMeter,
                             device: torch.device | None = None) -> str:
    """Register (once per process) a counted backend for `comm` (gloo, MPI or NCCL) whose
    groups wrap the real ones and count into `meter`; returns the backend name to
    initialise the process group with.

    `device`, the rank's bound GPU, becomes each NCCL group's `bound_device_id`: torch sets
    it on a placeholder group that it discards for the creator's ProcessGroup subclass, and
    without it barriers warn and guess a device, and new_group and DeviceMesh dimensions
    cannot split the default group's communicator (each pays a full NCCL initialisation)."""
    counted = COUNTED[comm]
    name = counted.name
    _TARGET.meter = meter
    _TARGET.device = device if comm == "nccl" else None
    if name in dist.Backend.backend_list:
        return name

    def create(options: Any, backend_options: Any = None) -> CountingProcessGroup:
        target = _TARGET.meter if _TARGET.meter is not None else CommMeter()
        # looked up at each group's creation: registration is once per process
        group = CountingProcessGroup(COUNTED[comm].inner(options, backend_options),
                                     options.group_rank, options.group_size, target, name, comm,
                                     options.store)
        if _TARGET.device is not None:
            group.bound_device_id = _TARGET.device
        return group

    dist.Backend.register_backend(name, create, extended_api=True,
                                  devices=list(counted.devices))
    install_batched_p2p()
    return name
