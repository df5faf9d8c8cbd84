"""The shared timing loop: counted calls, never asserted durations."""
from __future__ import annotations

import torch

from backends.cpu import CPUBackend
from harness.microbench.timing import time_calls


def counter() -> tuple[list[int], object]:
    calls: list[int] = []
    return calls, lambda: calls.append(1)


def test_warmup_calls_are_not_timed_and_min_reps_are() -> None:
    calls, fn = counter()
    samples = time_calls(fn, CPUBackend(), torch.device("cpu"), warmup=2, min_reps=3)
    assert len(calls) == 5
    assert len(samples) == 3 and all(s >= 0 for s in samples)


def test_a_budget_adds_calls_up_to_max_reps() -> None:
    calls, fn = counter()
    samples = time_calls(fn, CPUBackend(), torch.device("cpu"), min_reps=2, max_reps=7,
                         budget_s=3600.0)
    assert len(samples) == len(calls) == 7


def test_no_budget_means_exactly_min_reps() -> None:
    calls, fn = counter()
    assert len(time_calls(fn, CPUBackend(), torch.device("cpu"), min_reps=4,
                          max_reps=100)) == 4
