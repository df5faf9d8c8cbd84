"""Phase times on the host and on a GPU. The GPU is played by events on a fake device clock that
the test advances as kernels would run: launches return at once, the device's time moves on
its own, which is exactly where host timing goes wrong."""
from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from harness.strategies import base
from harness.strategies import clock as clock_module
from harness.strategies.clock import PhaseClock, straggle


class FakeDevice:
    """A device's timeline: `run(s)` queues s seconds of work; events mark the queue's end."""

    def __init__(self) -> None:
        self.queued_until = 0.0
        self.synchronized: list[float] = []
        # waits for an event with nothing queued behind it: the device then ran dry
        self.drained = 0
        self.streams: list[Any] = []

    def run(self, seconds: float) -> None:
        self.queued_until += seconds

    def event_class(self) -> type:
        device = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                assert enable_timing
                self.at: float | None = None
                self.waited = False

            def record(self, stream: Any = None) -> None:
                device.streams.append(stream)
                self.at = device.queued_until

            def synchronize(self) -> None:
                self.waited = True
                device.synchronized.append(self.at or 0.0)
                device.drained += (self.at or 0.0) >= device.queued_until

            def elapsed_time(self, end: Any) -> float:
                assert self.at is not None and end.at is not None and end.waited
                return (end.at - self.at) * 1000.0  # milliseconds, as CUDA events give

        return Event


@pytest.fixture
def device(monkeypatch: pytest.MonkeyPatch) -> FakeDevice:
    fake = FakeDevice()
    monkeypatch.setattr(torch.cuda, "Event", fake.event_class())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: ("stream", device))
    return fake


def test_a_gpu_phase_is_the_devices_time_not_the_launch(device: FakeDevice) -> None:
    clock = PhaseClock(torch.device("cuda", 1))
    with clock.phase("forward"):
        device.run(0.25)  # launched in no host time
    with clock.phase("backward"):
        device.run(0.5)
    with clock.phase("forward"):  # a second forward (pipelines run several) adds up
        device.run(0.125)
    clock.add("wait", 0.01)  # host-measured figures still add
    assert device.synchronized == []  # nothing waited for until a figure is needed
    clock.end_step()
    assert device.synchronized == []  # nor at the step's end: the step is read later
    assert clock.steps == [{"forward": 0.375, "backward": 0.5, "wait": 0.01}]
    assert device.synchronized  # reading the steps waited for the device
    # every event went to the stream of the clock's device, not the current device's
    assert set(device.streams) == {("stream", torch.device("cuda", 1))}


def test_gpu_steps_are_read_behind_the_device_never_draining_it(device: FakeDevice) -> None:
    """Ten steps: each end_step reads the step LAG_STEPS behind, whose events the device has
    long passed; no wait ever finds the device's queue empty until the figures are asked for,
    and then once."""
    from harness.strategies.clock import LAG_STEPS

    clock = PhaseClock(torch.device("cuda", 0))
    for step in range(10):
        with clock.phase("forward"):
            device.run(0.1 + step / 100)
        with clock.phase("backward"):
            device.run(0.2)
        clock.end_step()
        assert device.drained == 0
        assert len(device.synchronized) == 2 * max(0, step + 1 - LAG_STEPS)
    steps = clock.steps
    assert device.drained == 1  # the one wait for the newest step, when asked
    assert [round(s["forward"], 6) for s in steps] == [round(0.1 + i / 100, 6)
                                                       for i in range(10)]


def test_a_host_phase_is_wall_time() -> None:
    clock = PhaseClock(torch.device("cpu"))
    with clock.phase("forward"):
        time.sleep(0.02)
    clock.end_step()
    assert not clock.on_device and clock.steps[0]["forward"] >= 0.02


def test_a_gpu_straggler_waits_for_the_device_then_idles_it(
        device: FakeDevice, monkeypatch: pytest.MonkeyPatch) -> None:
    """The delay is (factor - 1) x the device's compute, slept after the device finished that
    compute, so the device has nothing queued while the rank sleeps."""
    slept: list[tuple[float, int]] = []
    monkeypatch.setattr(clock_module.time, "sleep",
                        lambda s: slept.append((s, len(device.synchronized))))
    clock = PhaseClock(torch.device("cuda", 0))
    rank = SimpleNamespace(clock=clock, straggler_factor=1.5,
                           spec=SimpleNamespace(straggler_work="idle"),
                           place=SimpleNamespace(device=torch.device("cuda", 0)))
    with clock.phase("forward"):
        device.run(0.2)
    with clock.phase("backward"):
        device.run(0.4)
    base.Strategy.straggle(rank)  # type: ignore[arg-type]
    (delay, synchronized_before), = slept
    assert delay == pytest.approx(0.3) and synchronized_before > 0
    clock.end_step()
    assert clock.steps[0]["straggler_delay"] == pytest.approx(0.3)
    assert clock.steps[0]["forward"] == pytest.approx(0.2)


def test_a_busy_straggler_computes_for_its_time_and_an_idle_one_sleeps(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """--straggler-work busy spends the delay in matrix products on the rank's device (its
    CPU time grows as slower code's would); idle sleeps it, computing nothing (products
    counted, not timed)."""
    products: list[int] = []
    real_mm = torch.mm

    def counted(*args: Any, **kwargs: Any) -> torch.Tensor:
        products.append(1)
        return real_mm(*args, **kwargs)

    monkeypatch.setattr(clock_module.torch, "mm", counted)
    before = time.process_time()
    straggle(0.05, "idle", torch.device("cpu"))
    assert products == []
    straggle(0.05, "busy", torch.device("cpu"))
    busy = len(products)
    assert busy >= 1 and time.process_time() - before > 0.0
    straggle(0.0, "busy", torch.device("cpu"))  # no delay, no work
    assert len(products) == busy
