"""One training step (forward, backward, optimizer step) of each workload, by pytest-benchmark.

Not collected by a plain `pytest` run (the file is not named test_*.py); run it explicitly:

    python3 -m pytest benchmarks/bench_steps.py --benchmark-only --benchmark-json=out.json

DTBENCH_BENCH_SIZE (tiny|small|full, default tiny), DTBENCH_BENCH_PRECISION (fp32|bf16|fp16,
default fp32) and DTBENCH_BENCH_BACKEND (cpu|cuda|auto, default cpu) choose the spec. The
model, data and optimizer come from dtbench's own Trainer, so a round is the step `dtbench run`
times, followed by a device sync; `dtbench report`/`compare` read the JSON
(harness/store/pytest_benchmark.py).
"""
from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest
import torch

from harness.core.errors import UsageError
from harness.rank.trainer import Trainer
from harness.run.plan import resolve
from harness.run.preflight import unavailable_reason
from harness.spec.specs import RunSpec
from workloads.flops import count_flops_per_sample

if TYPE_CHECKING:
    from pytest_benchmark.fixture import BenchmarkFixture

WORKLOAD_NAMES = ("alexnet", "resnet50", "hep_cnn", "lstm")
# The tiny presets time 5 steps; dtbench's 95% CI of the median needs at least 6 samples.
MIN_ROUNDS = 10


@pytest.fixture(scope="module", autouse=True)
def _save_round_data(request: pytest.FixtureRequest) -> None:
    """Make `--benchmark-save`/`--benchmark-autosave` keep every round's time, as
    `--benchmark-save-data` would; `--benchmark-json` always keeps them."""
    request.config.option.benchmark_save_data = True
    session = getattr(request.config, "_benchmarksession", None)
    if session is not None:
        session.save_data = True


def bench_spec(workload: str) -> RunSpec:
    """The validated spec of one benchmark: preset defaults, overridden from the environment."""
    options = {
        "workload": workload,
        "size": os.environ.get("DTBENCH_BENCH_SIZE", "tiny"),
        "precision": os.environ.get("DTBENCH_BENCH_PRECISION", "fp32"),
        "backend": os.environ.get("DTBENCH_BENCH_BACKEND", "cpu"),
    }
    try:
        spec = resolve(options, None)
    except UsageError as exc:
        pytest.fail(f"DTBENCH_BENCH_* settings: {exc}", pytrace=False)
    return spec.replace(steps=max(spec.steps, MIN_ROUNDS))


def prepare_step(spec: RunSpec) -> tuple[Trainer, Callable[[], torch.Tensor]]:
    """A Trainer of the spec and a closure running one synchronised step on a fixed batch."""
    trainer = Trainer(spec)
    generator = torch.Generator().manual_seed(spec.seed)
    inputs, targets = trainer.workload.synthetic_batch(spec.size, spec.batch_per_rank, "cpu",
                                                       generator)
    inputs, targets = trainer.to_device(inputs, targets)
    backend, device = trainer.backend, trainer.device

    def step() -> torch.Tensor:
        loss = trainer.step(inputs, targets)
        backend.synchronize(device)
        return loss

    return trainer, step


@pytest.mark.parametrize("workload", WORKLOAD_NAMES, ids=WORKLOAD_NAMES)
def test_train_step(benchmark: BenchmarkFixture, workload: str) -> None:
    spec = bench_spec(workload)
    reason = unavailable_reason(spec)
    if reason is not None:
        pytest.skip(reason)
    trainer, step = prepare_step(spec)
    benchmark.group = f"train_step {spec.size} {spec.backend} {spec.precision}"
    benchmark.extra_info.update({
        "spec": spec.as_dict(),
        "spec_key": spec.key(),
        "batch_size": spec.global_batch,
        "flops_per_sample": count_flops_per_sample(trainer.workload, spec.size),
        "settings": trainer.settings,
        "device_name": trainer.backend.device_name(trainer.device),
    })
    loss = benchmark.pedantic(step, rounds=spec.steps, warmup_rounds=spec.warmup, iterations=1)
    if benchmark.stats is not None:
        # A copy of the raw round times, so converters have samples whatever was saved.
        benchmark.extra_info["samples"] = list(benchmark.stats.stats.data)
    assert torch.isfinite(loss).all()
