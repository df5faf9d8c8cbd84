"""The measured steps never wait for a GPU to drain its queue, and every rank stops after the
same step. No GPU here: the device is a scripted timeline (launches return at once, the
device's time moves on its own) behind torch.cuda's events and synchronise, mocked."""
from __future__ import annotations

import contextlib
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from backends.cuda import CUDAEventTimer
from harness.rank import adaptive, measure
from harness.rank.measure import Decider
from harness.spec.specs import RunSpec
from harness.strategies.clock import PhaseClock

GPU = torch.device("cuda", 0)


class Timeline:
    """A GPU's queue: run(s) queues s seconds of work; an event marks the queue's end when
    recorded. A wait for an event with nothing queued behind it drains the device."""

    def __init__(self) -> None:
        self.queued_until = 0.0
        self.drained = 0
        self.device_syncs = 0

    def run(self, seconds: float) -> None:
        self.queued_until += seconds

    def synchronize(self, device: Any = None) -> None:
        self.device_syncs += 1
        self.drained += 1

    def event_class(self) -> type:
        timeline = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                self.at = 0.0

            def record(self, stream: Any = None) -> None:
                self.at = timeline.queued_until

            def synchronize(self) -> None:
                timeline.drained += self.at >= timeline.queued_until

            def elapsed_time(self, end: Any) -> float:
                return (end.at - self.at) * 1000.0

        return Event


@pytest.fixture
def timeline(monkeypatch: pytest.MonkeyPatch) -> Timeline:
    fake = Timeline()
    monkeypatch.setattr(torch.cuda, "Event", fake.event_class())
    monkeypatch.setattr(torch.cuda, "synchronize", fake.synchronize)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: device)
    return fake


def _spec(**changes: Any) -> RunSpec:
    return RunSpec(workload="hep_cnn", size="tiny", backend="cuda", batch_per_rank=4, steps=8,
                   warmup=1, target_ci=50.0, max_time=1e9).replace(**changes)


def test_an_adaptive_gpu_run_never_drains_the_device_per_step(timeline: Timeline) -> None:
    """Each step queues 30 ms of phases; after each one the step's timer, its phase clock and
    the stop decision are read. Nothing waits on the newest work until the end, where one
    synchronise reads the rest (the old loop synchronised at every step's end)."""
    spec = _spec()
    timer = CUDAEventTimer(GPU)
    clock = PhaseClock(GPU)
    decider = Decider(spec, 0, torch.device("cpu"), timer, contextlib.nullcontext)
    seen: list[tuple[int, int]] = []

    def step(index: int) -> torch.Tensor:
        with clock.phase("forward"):
            timeline.run(0.010)
        with clock.phase("backward"):
            timeline.run(0.020)
        return torch.tensor(2.0)

    def after(index: int) -> None:
        clock.end_step()
        seen.append((timeline.drained, timeline.device_syncs))

    losses, count, decision = measure.measure(spec, torch.device("cpu"), timer, decider, step,
                                              after, lambda *args: None)
    assert decision.stop and decision.reason == adaptive.TARGET_MET
    assert set(seen) == {(0, 0)}  # no step waited for the device to run dry
    # decided on the settled steps: those `lag` behind the newest
    assert count == max(spec.steps, adaptive.MIN_STEPS) + timer.lag
    assert timer.samples() == pytest.approx([0.030] * count)
    assert timeline.device_syncs == 1
    assert [round(s["backward"], 6) for s in clock.steps] == [0.02] * count
    assert losses[:count].tolist() == [2.0] * count


def test_a_fixed_length_gpu_run_does_not_wait_either(timeline: Timeline) -> None:
    spec = _spec(target_ci=None, max_time=None, steps=6)
    timer = CUDAEventTimer(GPU)
    decider = Decider(spec, 0, torch.device("cpu"), timer, contextlib.nullcontext)

    def step(index: int) -> torch.Tensor:
        timeline.run(0.01)
        return torch.tensor(1.0)

    _, count, decision = measure.measure(spec, torch.device("cpu"), timer, decider, step,
                                         lambda index: None, lambda *args: None)
    assert count == 6 and decision.reason == adaptive.FIXED
    assert timeline.drained == 0


class ScriptedTimer:
    """Step times known `lag` steps late, as a device timer gives them."""

    lag = 2

    def __init__(self) -> None:
        self.times: list[float] = []

    def settled(self) -> list[float]:
        return self.times[:max(0, len(self.times) - self.lag)]


def test_every_rank_stops_after_the_same_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two ranks: rank 0 decides from its settled times; each rank reads the broadcast word
    `lag` steps after it was sent. Both stop after the same step, `lag` steps after the
    step whose word said stop, and the discard rank 0 chose comes with it."""
    spec = _spec(comm="gloo", backend="cpu", nproc_per_node=2, steps=4)
    timers = [ScriptedTimer(), ScriptedTimer()]
    deciders = [Decider(spec, rank, torch.device("cpu"), timers[rank], contextlib.nullcontext)
                for rank in (0, 1)]
    channel = SimpleNamespace(word=None, caller=0)

    def broadcast(word: torch.Tensor, src: int = 0) -> None:
        if channel.caller == src:
            channel.word = word.clone()
        else:
            word.copy_(channel.word)

    monkeypatch.setattr(torch.distributed, "broadcast", broadcast)
    own: list[adaptive.Decision] = []
    real_own = Decider.own
    monkeypatch.setattr(Decider, "own",
                        lambda self, elapsed: own.append(real_own(self, elapsed)) or own[-1])
    stopped: dict[int, int] = {}
    discards: dict[int, int] = {}
    for step in range(1, 40):
        for rank in (0, 1):
            if rank in stopped:
                continue
            timers[rank].times.append(0.05)
            channel.caller = rank
            decision = deciders[rank].after(elapsed=0.05 * step)
            if decision.stop:
                stopped[rank], discards[rank] = step, decision.discard
        if len(stopped) == 2:
            break
    assert stopped[0] == stopped[1]
    rank0_first_stop = 1 + [d.stop for d in own[0::2]].index(True)
    assert stopped[0] == rank0_first_stop + deciders[0].lag
    assert discards[0] == discards[1]
