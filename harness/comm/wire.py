"""What the server strategies' wire protocols share: the parameter server's (paramserver.py:
ps-sync, ps-async, downpour, ssp, hybrid) and Sandblaster's (sandblaster.py), both over
torch.distributed point-to-point, so that the counting process group (meter.py) sees every
byte.

- A message opens with a header of a fixed number of words of one dtype (`Header`); what
  follows it (a gradient, parameters, a plan) comes on a tag of its own, from or to the rank
  the header came from or went to. Each protocol has its own tags (`Tags`: the four every
  fetch-and-push protocol has, and its own beside them), none shared between protocols.
- A server takes headers from any rank (gloo and dtbench's MPI group receive from any
  source) and learns the sender from the receive, so it serves workers as they arrive.
- A worker fetches by asking every server for a least version; a server answers once its
  version reached it, with a reply header on the reply tag and its parameters on the
  parameters tag (`answer_fetch`, `receive_fetched`).
- In a run that tolerates lost workers (LOST_DIR_VAR set), a server receives on a thread
  (gloo's receive can be neither polled nor timed out: `arrivals`) and, between messages,
  looks for the workers the supervisor booked as lost in the run directory (`lost_workers`).
"""
from __future__ import annotations

import contextlib
import os
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from harness.comm.meter import CommMeter
from harness.rundir import LostWorker, RunDir

# Set on the ranks of a run that tolerates lost workers: the run directory, where the
# supervisor books each worker it saw die (RunDir.lost_workers).
LOST_DIR_VAR = "DTBENCH_LOST_DIR"
# How often a server waiting for messages looks for lost workers (seconds).
LOST_CHECK_S = 0.2


@dataclass(frozen=True)
class Header:
    """A protocol's message header: `words` numbers of one dtype, zero-padded."""

    words: int
    dtype: torch.dtype

    @property
    def nbytes(self) -> int:
        return self.words * torch.empty((), dtype=self.dtype).element_size()

    def pack(self, *values: float, last: float | None = None) -> torch.Tensor:
        """A header of `values` then zeros; `last`, where given, fills the final word."""
        cast = float if self.dtype.is_floating_point else int
        words = [cast(value) for value in values]
        tail = [] if last is None else [cast(last)]
        words += [cast(0)] * (self.words - len(words) - len(tail))
        return torch.tensor(words + tail, dtype=self.dtype)

    def empty(self) -> torch.Tensor:
        return torch.empty(self.words, dtype=self.dtype)

    def receive_any(self, tag: int, group: Any = None) -> tuple[int, list[Any]]:
        """The next header on `tag` from any rank: its sender and its words."""
        buffer = self.empty()
        work = dist.irecv(buffer, src=None, tag=tag, group=group)
        work.wait()
        return int(work._source_rank()), buffer.tolist()


@dataclass(frozen=True)
class Tags:
    """The tags of a fetch-and-push protocol: requests to a server, a pushed gradient, the
    reply header to a fetch and the parameters after it."""

    request: int
    gradient: int
    reply: int
    parameters: int


def counted(meter: CommMeter | None, kind: str) -> contextlib.AbstractContextManager[None]:
    """The bytes sent inside count as `kind` (gradient, parameter, control) where metered."""
    return meter.kind(kind) if meter is not None else contextlib.nullcontext()


def send(meter: CommMeter | None, kind: str, tensor: torch.Tensor, dst: int, tag: int,
         group: Any = None) -> None:
    with counted(meter, kind):
        dist.send(tensor, dst=dst, tag=tag, group=group)


def answer_fetch(meter: CommMeter | None, worker: int, reply: torch.Tensor,
                 pieces: Iterable[torch.Tensor], tags: Tags, group: Any = None) -> None:
    """A server's answer to a fetch: the reply header (control bytes), then the parameters,
    piece by piece in the order given."""
    send(meter, "control", reply, worker, tags.reply, group)
    with counted(meter, "parameter"):
        for piece in pieces:
            dist.send(piece, dst=worker, tag=tags.parameters, group=group)


def receive_fetched(flat: torch.Tensor, servers: Sequence[int],
                    bounds: Sequence[tuple[int, int]], header: Header, tags: Tags,
                    version_word: int, group: Any = None) -> int:
    """A worker's side of a fetch asked of every server: each one's reply header and shard
    into flat[lo:hi], in server order; the least version the servers answered with (the
    reply header's word `version_word`)."""
    reply = header.empty()
    versions = []
    for server, (lo, hi) in zip(servers, bounds, strict=True):
        dist.recv(reply, src=server, tag=tags.reply, group=group)
        versions.append(int(reply[version_word]))
        shard = torch.empty(hi - lo, dtype=flat.dtype)
        dist.recv(shard, src=server, tag=tags.parameters, group=group)
        flat[lo:hi].copy_(shard)
    return min(versions)


def arrivals(receive: Callable[[], Any], timeout: Callable[[], float] = lambda: LOST_CHECK_S,
             last: Callable[[Any], bool] = lambda item: False,
             name: str = "dtbench-server-receive") -> Iterator[Any]:
    """Messages as a thread receives them, and None after timeout() seconds without one (so
    the caller can look for lost workers, or do what is due); the thread stops after a
    message for which last(message) holds; a receive error is raised here."""
    found: queue.Queue[Any] = queue.Queue()

    def forever() -> None:
        try:
            while True:
                item = receive()
                found.put(item)
                if last(item):
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the serving thread
            found.put(exc)

    threading.Thread(target=forever, daemon=True, name=name).start()
    while True:
        try:
            item = found.get(timeout=timeout())
        except queue.Empty:
            item = None
        if isinstance(item, BaseException):
            raise item
        yield item


def watching_lost() -> bool:
    """Whether this run tolerates lost workers (its servers watch for them)."""
    return LOST_DIR_VAR in os.environ


def lost_workers() -> dict[int, LostWorker]:
    """Workers the supervisor booked as lost (a run that tolerates losing them), by rank."""
    watch = os.environ.get(LOST_DIR_VAR)
    return {lost.rank: lost for lost in RunDir(Path(watch)).lost_workers()} if watch else {}
