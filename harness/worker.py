"""One rank's work: build the model on its backend, train, time each step, measure memory.

The worker returns raw measurements only (a RankResult); turning them into metrics is the
collectors' job in the launching process, so per-rank results can be folded together.
"""
from __future__ import annotations

import math
import os
import signal
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from harness import mlperf
from harness.errors import RunFailed, SkipRun
from harness.spec import RunSpec

ProgressFn = Callable[[str, int, int], None]


@dataclass
class RankResult:
    """Raw measurements of one rank; JSON-serialisable so ranks in other processes can report."""

    rank: int
    world_size: int
    device_name: str
    settings: dict[str, Any]
    step_times: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    peak_memory: int | None = None
    energy_joules: float | None = None
    energy_reason: str | None = None
    quality: dict[str, float] | None = None
    quality_history: list[dict[str, Any]] = field(default_factory=list)
    target_reached: bool | None = None
    time_to_train: float | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    comm_payload_bytes: list[int] = field(default_factory=list)
    param_checksums: list[float] = field(default_factory=list)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RankResult:
        return cls(**data)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _no_progress(phase: str, done: int, total: int) -> None:
    return None


class Trainer:
    """The training step of a spec on its backend, shared by throughput and time-to-train."""

    def __init__(self, spec: RunSpec, rank: int = 0, local_rank: int = 0) -> None:
        from backends import COMPUTE_BACKENDS
        from backends.ipex import ipex_availability, ipex_optimize
        from workloads import get_workload

        self.spec = spec
        self.rank = rank
        self.workload = get_workload(spec.workload)
        self.preset = self.workload.preset(spec.size)
        self.backend = COMPUTE_BACKENDS.get(spec.backend)()
        self.device = self.backend.device(local_rank)
        self.settings = self.backend.configure(spec.threads, spec.precision)
        # The same seed on every rank: data parallelism starts from identical parameters.
        torch.manual_seed(spec.seed)
        model = self.workload.build_model(spec.size)
        channels_last = spec.channels_last and self.workload.image_model
        self.channels_last = channels_last
        self.model = self.backend.prepare_model(model, self.device, channels_last, spec.compile)
        self.comm_counter = None
        if spec.distributed:
            from harness.distributed import wrap_data_parallel

            self.model = wrap_data_parallel(self.model, spec, self.device)
            self.comm_counter = self.model.dtbench_comm_counter
        torch.manual_seed(spec.seed + rank)
        self.optimizer = self.workload.optimizer(self.model, spec.size)
        self.settings["ipex"] = False
        if spec.backend == "cpu" and ipex_availability().available:
            self.model, self.optimizer = ipex_optimize(self.model, self.optimizer, spec.precision)
            self.settings["ipex"] = True
        self.scaler = self.backend.grad_scaler(spec.precision)
        self.grad_clip = self.preset.extra.get("grad_clip")
        self.settings["channels_last"] = channels_last
        self.settings["compile"] = spec.compile

    def autocast(self) -> Any:
        return self.backend.autocast(self.device, self.spec.precision)

    def to_device(self, inputs: torch.Tensor, targets: torch.Tensor,
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        inputs = inputs.to(self.device, non_blocking=True)
        if self.channels_last and inputs.dim() == 4:
            inputs = inputs.contiguous(memory_format=torch.channels_last)
        return inputs, targets.to(self.device, non_blocking=True)

    def step(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """One optimizer step; returns the detached loss without forcing a device sync."""
        self.optimizer.zero_grad(set_to_none=True)
        with self.autocast():
            loss = self.workload.loss(self.model(inputs), targets)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            if self.grad_clip:
                self.scaler.unscale_(self.optimizer)
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            if self.grad_clip:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
            self.optimizer.step()
        if self.comm_counter is not None:
            self.comm_counter.end_step()
        return loss.detach()

    def new_result(self) -> RankResult:
        return RankResult(rank=self.rank, world_size=self.spec.world_size,
                          device_name=self.backend.device_name(self.device),
                          settings=self.settings)


FAULT_VAR = "DTBENCH_FAULT"
CHECK_SYNC_VAR = "DTBENCH_CHECK_SYNC"


def inject_fault(rank: int, step: int, model: torch.nn.Module | None = None) -> None:
    """Test hook: DTBENCH_FAULT="kill|hang|raise|oom|nan:RANK:STEP" misbehaves on purpose.

    Used by the fault-injection tests to prove that a dead or stuck rank ends the run in
    bounded time with a `failed` record naming it; unset, it costs one dict lookup a step.
    """
    fault = os.environ.get(FAULT_VAR)
    if not fault:
        return
    kind, _, where = fault.partition(":")
    target_rank, _, target_step = where.partition(":")
    if int(target_rank or 0) != rank or int(target_step or 0) != step:
        return
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif kind == "hang":
        while True:
            time.sleep(60)
    elif kind == "raise":
        raise RuntimeError(f"injected fault at step {step}")
    elif kind == "oom":
        torch.empty(1 << 60, dtype=torch.uint8)  # a real allocation failure, not a mock
    elif kind == "nan" and model is not None:
        with torch.no_grad():  # the loss of this step, and the training after it, diverge
            next(model.parameters()).fill_(float("nan"))


def parameter_checksum(model: torch.nn.Module) -> float:
    """Sum of all parameters in float64: equal across ranks when the replicas agree."""
    with torch.no_grad():
        return float(sum(p.detach().double().sum() for p in model.parameters()))


def _check_finite(losses: list[float], first_step: int) -> None:
    for index, value in enumerate(losses):
        if not math.isfinite(value):
            raise RunFailed(f"diverged at step {first_step + index}: loss is {value}")


def run_throughput(spec: RunSpec, rank: int = 0, local_rank: int = 0,
                   progress: ProgressFn = _no_progress) -> RankResult:
    """Warm up, then time `spec.steps` steps on one fixed synthetic batch."""
    trainer = Trainer(spec, rank, local_rank)
    result = trainer.new_result()
    generator = torch.Generator().manual_seed(spec.seed + rank)
    inputs, targets = trainer.workload.synthetic_batch(spec.size, spec.batch_per_rank, "cpu",
                                                       generator)
    inputs, targets = trainer.to_device(inputs, targets)
    backend, device = trainer.backend, trainer.device
    for index in range(spec.warmup):
        trainer.step(inputs, targets)
        progress("warmup", index + 1, spec.warmup)
    backend.synchronize(device)
    backend.reset_peak_memory(device)
    meter = backend.energy_meter(device)
    energy_start = meter.joules() if meter is not None else None
    timer = backend.timer(device)
    # Losses go into one preallocated tensor: keeping per-step loss tensors fragments the
    # heap (and each can pin a large buffer), growing memory step by step.
    losses = torch.empty(spec.steps, device=device)
    check_sync = os.environ.get(CHECK_SYNC_VAR) == "1"
    for index in range(spec.steps):
        inject_fault(rank, index, trainer.model)
        timer.start()
        losses[index] = trainer.step(inputs, targets)
        timer.stop()
        if check_sync:
            result.param_checksums.append(parameter_checksum(trainer.model))
        progress("measure", index + 1, spec.steps)
    backend.synchronize(device)
    result.step_times = timer.samples()
    if meter is not None and energy_start is not None:
        result.energy_joules = meter.joules() - energy_start
    else:
        result.energy_reason = backend.energy_unavailable_reason()
    result.peak_memory = backend.peak_memory(device)
    result.losses = [float(v) for v in losses.cpu()]
    if trainer.comm_counter is not None:
        result.comm_payload_bytes = trainer.comm_counter.payload_bytes[-spec.steps:]
    _check_finite(result.losses, spec.warmup)
    return result


def run_time_to_train(spec: RunSpec, log_path: Path | None, rank: int = 0, local_rank: int = 0,
                      progress: ProgressFn = _no_progress) -> RankResult:
    """Train on real data until the quality target is reached (MLPerf timing rules)."""
    log = mlperf.RunLog(log_path if rank == 0 else None)
    try:
        return _time_to_train(spec, log, rank, local_rank, progress)
    finally:
        log.close()


def _time_to_train(spec: RunSpec, log: mlperf.RunLog, rank: int, local_rank: int,
                   progress: ProgressFn) -> RankResult:
    log.event(mlperf.SUBMISSION_BENCHMARK, spec.workload)
    log.start(mlperf.INIT_START)
    trainer = Trainer(spec, rank, local_rank)
    result = trainer.new_result()
    target = trainer.preset.target
    try:
        train, evaluation = trainer.workload.datasets(spec.size, spec.data, spec.seed)
    except NotImplementedError as exc:
        raise SkipRun(str(exc)) from None
    if len(train) < spec.batch_per_rank * spec.world_size:
        raise RunFailed(f"training set has {len(train)} samples, fewer than one global batch "
                        f"of {spec.global_batch}")
    log.event(mlperf.SEED, spec.seed)
    log.event(mlperf.GLOBAL_BATCH_SIZE, spec.global_batch)
    log.event(mlperf.OPT_BASE_LR, trainer.preset.lr)
    log.event(mlperf.TRAIN_SAMPLES, len(train))
    log.event(mlperf.EVAL_SAMPLES, len(evaluation))
    log.end(mlperf.INIT_STOP)
    generator = torch.Generator().manual_seed(spec.seed)
    backend, device = trainer.backend, trainer.device
    backend.reset_peak_memory(device)
    timer = backend.timer(device)
    steps_per_epoch = len(train) // spec.world_size // spec.batch_per_rank
    total_steps = steps_per_epoch * target.max_epochs
    losses = torch.empty(total_steps, device=device)
    step = 0
    log.start(mlperf.RUN_START)
    started = time.perf_counter()
    reached = False
    quality: dict[str, float] = {}
    for epoch in range(1, target.max_epochs + 1):
        log.start(mlperf.EPOCH_START, metadata={"epoch_num": epoch})
        for inputs, targets in train.batches(spec.batch_per_rank, generator,
                                             shard=(rank, spec.world_size)):
            inputs, targets = trainer.to_device(inputs, targets)
            timer.start()
            losses[step] = trainer.step(inputs, targets)
            timer.stop()
            step += 1
            progress("train", step, total_steps)
        log.end(mlperf.EPOCH_STOP, metadata={"epoch_num": epoch})
        epoch_losses = [float(v) for v in losses[step - steps_per_epoch:step].cpu()]
        _check_finite(epoch_losses, step - len(epoch_losses))
        if epoch % target.eval_every_epochs and epoch != target.max_epochs:
            continue
        progress("eval", epoch, target.max_epochs)
        log.start(mlperf.EVAL_START, metadata={"epoch_num": epoch})
        quality = trainer.workload.evaluate(trainer.model, evaluation, spec.batch_per_rank * 4,
                                            device, trainer.autocast)
        log.end(mlperf.EVAL_STOP, metadata={"epoch_num": epoch})
        value = quality[target.metric]
        log.event(mlperf.EVAL_ACCURACY, value, metadata={"epoch_num": epoch,
                                                         "metric": target.metric})
        result.quality_history.append({"epoch": epoch, "step": step,
                                       "seconds": time.perf_counter() - started, **quality})
        if target.reached(value):
            reached = True
            break
    elapsed = time.perf_counter() - started
    log.end(mlperf.RUN_STOP, metadata={"status": mlperf.STATUS_SUCCESS if reached
                                       else mlperf.STATUS_ABORTED})
    result.step_times = timer.samples()
    result.losses = [float(v) for v in losses[:step].cpu()]
    result.peak_memory = backend.peak_memory(device)
    result.quality = quality
    result.target_reached = reached
    result.time_to_train = elapsed
    result.events = log.events
    result.energy_reason = backend.energy_unavailable_reason()
    return result
