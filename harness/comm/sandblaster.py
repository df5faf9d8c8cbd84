"""Sandblaster's wire protocol (harness/strategies/sandblaster.py), over torch.distributed
point-to-point like the parameter server's (what the two share is said in wire.py); its
serving loops are harness/strategies/sandblaster_servers.py.

Every message starts with a header of HEADER.words float64 words (integers below 2**53 are
exact): [operation, step, three operands, a fourth, 0, a scalar].

- worker -> coordinator (TAG_COORD): FINISH(step, portion, samples, summed loss) asks whether
  a computed portion is kept; ASK(step, the portion just pushed or -1) asks for work; BYE at
  the end.
- coordinator -> worker (TAG_ANSWER): VERDICT(step, keep) and ASSIGN(step, portion or -1 =
  the batch is complete, the batch's mean loss).
- worker -> shard (TAGS.request): PUSH(step, portion) then the slice of the gradient of the
  portion's summed loss (TAGS.gradient);
  FETCH(step, least version), answered with a reply header FETCH(version) (TAGS.reply) and the
  parameter slice (TAGS.parameters) once the shard's version is at least that.
- coordinator -> shard (TAGS.request): the vector commands of harness/strategies/lbfgs.py (a
  reduction answers with two float64 on TAG_RESULT), GATHER(step, portions, samples) — the
  batch's mean gradient into g once every portion's push is in, duplicates dropped —
  PUBLISH(version) and QUIT.
"""
from __future__ import annotations

from typing import Any

import torch

from harness.comm.wire import Header, Tags

HEADER = Header(8, torch.float64)
HEADER_BYTES = HEADER.nbytes
RESULT_BYTES = 2 * 8
TAGS = Tags(request=31, gradient=32, reply=33, parameters=34)
TAG_RESULT, TAG_COORD, TAG_ANSWER = 35, 36, 37
PUSH, FETCH = 101, 102
GATHER, PUBLISH, QUIT = 110, 111, 112
FINISH, ASK, BYE = 201, 202, 203
VERDICT, ASSIGN = 301, 302


def header(op: int, step: int = 0, *words: float, alpha: float = 0.0) -> torch.Tensor:
    """[op, step, *words, 0 ..., alpha]."""
    return HEADER.pack(op, step, *words, last=alpha)


def receive_header(tag: int) -> tuple[int, list[float]]:
    """The next header on `tag` from any rank: (its sender, its words)."""
    return HEADER.receive_any(tag)


def is_quit(item: Any) -> bool:
    """A received (sender, words, ...) that ends a shard's receiving: QUIT."""
    return int(item[1][0]) == QUIT
