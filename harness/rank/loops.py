"""The two measurement loops of a rank: throughput on a fixed synthetic batch (or --data files),
time-to-train on real data under MLPerf timing rules."""
from __future__ import annotations

import contextlib
import copy
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from harness.comm.meter import CommMeter
from harness.core.errors import RunFailed, SkipRun
from harness.rank import adaptive, mlperf
from harness.rank.energy import EnergyWindow
from harness.rank.faults import check_finite, inject_fault, parameter_checksum
from harness.rank.feed import Feed
from harness.rank.measure import Decider, SpeedProbe, measure
from harness.rank.trainer import Trainer
from harness.rundir import CHECK_SYNC_VAR, RankResult
from harness.spec.specs import RunSpec

ProgressFn = Callable[[str, int, int], None]


def _no_progress(phase: str, done: int, total: int) -> None:
    return None


def _peak_reading(trainer: Trainer, result: RankResult, when: str) -> None:
    """With --peak in-run, time the device's GEMM peak and copy bandwidth now: on a GPU, at
    sizes that fit the memory the model and its steps left free (the allocator's cached
    blocks given back first), or not at all, with the reason (microbench/peak.probe_plan)."""
    spec = trainer.spec
    if spec.peak != "in-run":
        return
    from harness.microbench.peak import in_run_reading

    if trainer.device.type == "cuda":
        trainer.backend.release_freed_memory(trainer.device)
    threads = int(trainer.settings.get("threads", spec.threads))
    result.peak_readings.append(in_run_reading(spec.backend, spec.precision, threads,
                                               trainer.device, when, trainer.backend))
    trainer.backend.release_freed_memory(trainer.device)


def _finish(trainer: Trainer, result: RankResult, measured: int) -> None:
    """What every loop reports besides times: counted bytes, phases, state, the role."""
    strategy = trainer.strategy
    if trainer.meter is not None:
        meter = trainer.meter
        result.comm_bytes = meter.steps[-measured:] if measured else []
        result.comm_payload = meter.payload_steps[-measured:] if measured else []
        meter.discard("after the steps")
        result.comm_outside = dict(meter.outside_steps)
    result.phase_times = strategy.clock.steps[-measured:] if measured else []
    result.state_bytes = strategy.state_bytes()
    result.role = strategy.role
    result.strategy_stats = strategy.step_stats()
    strategy.finish()


def _serve(trainer: Trainer, result: RankResult, total_steps: int,
           progress: ProgressFn) -> RankResult:
    """A serving rank (parameter server): serve until every worker is done; its bytes are
    reported per round of worker steps, so they compare with the analytic volume."""
    strategy = trainer.strategy
    started = time.perf_counter()

    def served(phase: str, done: int, total: int) -> None:
        inject_fault(trainer.rank, done)  # DTBENCH_FAULT=kill:SERVER:STEP, by workers' steps
        progress(phase, done, total)

    strategy.serve(served, total_steps)
    result.time_to_train = None
    if trainer.meter is not None:
        served = trainer.meter.end_step()
        rounds = max(1.0, strategy.served_rounds())
        result.comm_bytes = [{kind: int(round(value / rounds)) for kind, value in served.items()}]
        result.comm_payload = [int(round(trainer.meter.payload_steps[-1] / rounds))]
        result.comm_outside = dict(trainer.meter.outside_steps)
    result.role = strategy.role
    result.state_bytes = strategy.state_bytes()
    result.strategy_stats = {**strategy.step_stats(),
                             "served_s": time.perf_counter() - started}
    strategy.finish()
    return result


# IPEX and torch.compile keep rewriting kernels over their first steps: their warm-up goes on
# (up to this many steps more) until the last STEADY_WINDOW warm-up steps lie within
# STEADY_SPREAD of each other.
MAX_EXTRA_WARMUP = 12
STEADY_WINDOW = 3
STEADY_SPREAD = 0.10


def steady(times: list[float]) -> bool:
    """The last STEADY_WINDOW step times differ by at most STEADY_SPREAD of the fastest."""
    if len(times) < STEADY_WINDOW:
        return False
    window = times[-STEADY_WINDOW:]
    return max(window) <= (1.0 + STEADY_SPREAD) * min(window)


def _extends_warmup(spec: RunSpec) -> bool:
    """Only a run of one rank decides alone when its warm-up ends: ranks of a larger run take
    part in each other's steps (and servers count them), so they keep the fixed count. An
    IPEX run keeps it too: its prepacked weights and fused optimizer do not take back a
    saved state dict (the rewind below left hep_cnn's loss NaN at step 2 under IPEX 2.8)."""
    return bool(spec.compile) and not spec.ipex and spec.world_size == 1


class _Rewind:
    """The training state a fixed-length warm-up leaves (parameters, optimizer and scaler
    state, the strategy's step counters, the random streams). The steps an IPEX/compile
    warm-up adds until step times settle are a timing decision: without rewinding, how noisy
    the machine was would decide which model (and which dropout masks) the measured steps
    train."""

    def __init__(self, trainer: Trainer) -> None:
        strategy = trainer.strategy
        self.strategy = strategy
        self.scaler = trainer.recipe.scaler
        # `is not None`, not truth: a compiled module answers bool() with its model's len()
        self.model = copy.deepcopy(strategy.model.state_dict()) \
            if strategy.model is not None else None
        self.optimizer = copy.deepcopy(strategy.optimizer.state_dict()) \
            if strategy.optimizer is not None else None
        self.scaler_state = copy.deepcopy(self.scaler.state_dict()) \
            if self.scaler is not None else None
        # Step counters a strategy keeps (tensor parallelism seeds its dropout by them).
        self.counters = {name: value for name, value in vars(strategy).items()
                         if type(value) is int}
        self.rng = torch.random.get_rng_state()
        self.cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None

    def restore(self) -> None:
        strategy = self.strategy
        if self.model is not None and strategy.model is not None:
            strategy.model.load_state_dict(self.model)
        if self.optimizer is not None:
            strategy.optimizer.load_state_dict(self.optimizer)
        if self.scaler_state is not None:
            self.scaler.load_state_dict(self.scaler_state)
        for name, value in self.counters.items():
            setattr(strategy, name, value)
        torch.random.set_rng_state(self.rng)
        if self.cuda_rng is not None:
            torch.cuda.set_rng_state_all(self.cuda_rng)


def _outside(trainer: Trainer, phase: str) -> contextlib.AbstractContextManager[None]:
    """Count the traffic of a block apart from the training steps, under `phase`."""
    return trainer.meter.outside(phase) if trainer.meter is not None \
        else contextlib.nullcontext()


def _profile(trainer: Trainer, feed: Feed) -> str:
    """--profile-steps more steps under the profiler; their phase times and counted bytes are
    dropped, so that every figure stays the measured steps'."""
    from harness.rank.profiling import profile_steps

    clock, meter = trainer.strategy.clock, trainer.meter
    kept = (len(clock.steps), len(meter.steps) if meter else 0,
            len(meter.payload_steps) if meter else 0)

    def step() -> None:
        inputs, targets, _ = feed.next()
        trainer.step(inputs, targets)
        _end_step(trainer)

    trace = profile_steps(step, trainer.spec.profile_steps, trainer.device)
    del clock.steps[kept[0]:]
    if meter is not None:
        del meter.steps[kept[1]:]
        del meter.payload_steps[kept[2]:]
    return trace


def _end_step(trainer: Trainer) -> None:
    if trainer.meter is not None:
        trainer.meter.end_step()


def run_throughput(spec: RunSpec, rank: int = 0, local_rank: int = 0,
                   progress: ProgressFn = _no_progress,
                   meter: CommMeter | None = None) -> RankResult:
    """Warm up, then time `spec.steps` steps on one fixed synthetic batch."""
    trainer = Trainer(spec, rank, local_rank, meter)
    result = trainer.new_result()
    if trainer.strategy.serves:
        return _serve(trainer, result, spec.warmup + spec.steps, progress)
    feed = Feed(trainer, rank)
    backend, device = trainer.backend, trainer.device
    # Before the warm-up: the steps after it then find their heap as the warm-up left it,
    # not trimmed of the probe's buffers.
    _peak_reading(trainer, result, "before")
    warmup = spec.warmup
    index = 0
    rewind: _Rewind | None = None
    while index < warmup:
        started = time.perf_counter()
        inputs, targets, _ = feed.next()
        trainer.step(inputs, targets)
        _end_step(trainer)
        backend.synchronize(device)
        result.warmup_times.append(time.perf_counter() - started)
        index += 1
        if index == warmup and _extends_warmup(spec) \
                and not steady(result.warmup_times) and warmup < spec.warmup + MAX_EXTRA_WARMUP:
            if rewind is None:
                rewind = _Rewind(trainer)
            warmup += 1
        progress("warmup", index, warmup)
    if rewind is not None:
        rewind.restore()
    backend.reset_peak_memory(device)
    energy = EnergyWindow(backend, device)
    timer = backend.timer(device)
    check_sync = os.environ.get(CHECK_SYNC_VAR) == "1"
    waits: list[float] = []

    def step(index: int) -> torch.Tensor:
        inject_fault(rank, index, trainer.model)
        inputs, targets, waited = feed.next()
        waits.append(waited)
        return trainer.step(inputs, targets)

    probe = SpeedProbe(device) if spec.speed_probe else None
    probes: list[float] = []

    def after(index: int) -> None:
        _end_step(trainer)
        if probe is not None:
            probes.append(probe.time())
        if check_sync:
            result.param_checksums.append(parameter_checksum(trainer.model))

    decider = Decider(spec, rank, device, timer, lambda: _outside(trainer, "stop decision"))
    losses, index, decision = measure(spec, device, timer, decider, step, after, progress)
    backend.synchronize(device)
    times = timer.samples()
    result.settling_times = times[:decision.discard]
    result.step_times = times[decision.discard:]
    result.step_cpu_times = timer.cpu_samples()[decision.discard:]
    result.probe_times = probes[decision.discard:]
    result.measurement = adaptive.summary(times, decision.discard, decision.reason,
                                          target=spec.target_ci, max_time=spec.max_time)
    result.data = feed.summary(waits[decision.discard:])
    # Memory and energy are read before the after-run peak probe, whose GEMM operands and
    # copy buffers are the harness's, not the workload's.
    energy.close(result, index)
    result.peak_memory = backend.peak_memory(device)
    result.memory = backend.memory_details(device)
    if spec.profile:
        result.trace = _profile(trainer, feed)
    _peak_reading(trainer, result, "after")
    result.losses = [float(v) for v in losses[:index].cpu()]
    _finish(trainer, result, len(result.step_times))
    check_finite(result.losses, spec.warmup)
    return result


def run_time_to_train(spec: RunSpec, log_path: Path | None, rank: int = 0, local_rank: int = 0,
                      progress: ProgressFn = _no_progress,
                      meter: CommMeter | None = None) -> RankResult:
    """Train on real data until the quality target is reached (MLPerf timing rules)."""
    log = mlperf.RunLog(log_path if rank == 0 else None)
    try:
        return _time_to_train(spec, log, rank, local_rank, progress, meter)
    finally:
        log.close()


def _datasets(trainer: Trainer) -> tuple[Any, Any]:
    """The run's splits: --data files through the loader (workloads/files), else the
    workload's in-memory sets."""
    from workloads.files import file_datasets, is_file_dataset, loader_options

    spec = trainer.spec
    if is_file_dataset(spec.data):
        assert spec.data is not None
        return file_datasets(trainer.workload, spec.size, spec.data,
                             loader_options(spec, trainer.device.type == "cuda"))
    return trainer.workload.datasets(spec.size, spec.data, spec.seed)


def _time_to_train(spec: RunSpec, log: mlperf.RunLog, rank: int, local_rank: int,
                   progress: ProgressFn, meter: CommMeter | None) -> RankResult:
    log.event(mlperf.SUBMISSION_BENCHMARK, spec.workload)
    log.start(mlperf.INIT_START)
    trainer = Trainer(spec, rank, local_rank, meter)
    result = trainer.new_result()
    if trainer.strategy.serves:
        return _serve(trainer, result, 0, progress)
    target = trainer.preset.target
    try:
        train, evaluation = _datasets(trainer)
    except NotImplementedError as exc:
        raise SkipRun(str(exc)) from None
    if len(train) < spec.global_batch:
        raise RunFailed(f"training set has {len(train)} samples, fewer than one global batch "
                        f"of {spec.global_batch}")
    log.event(mlperf.SEED, spec.seed)
    log.event(mlperf.GLOBAL_BATCH_SIZE, spec.global_batch)
    log.event(mlperf.OPT_BASE_LR, trainer.recipe.optimizer_kwargs["lr"])
    log.event(mlperf.TRAIN_SAMPLES, len(train))
    log.event(mlperf.EVAL_SAMPLES, len(evaluation))
    log.end(mlperf.INIT_STOP)
    generator = torch.Generator().manual_seed(spec.seed)
    backend, device = trainer.backend, trainer.device
    _peak_reading(trainer, result, "before")
    backend.reset_peak_memory(device)
    energy = EnergyWindow(backend, device)
    timer = backend.timer(device)
    shard = trainer.data_shard()
    steps_per_epoch = len(train) // shard[1] // spec.batch_per_rank
    trainer.warmup.start(steps_per_epoch)
    total_steps = steps_per_epoch * target.max_epochs
    losses = torch.empty(total_steps, device=device)
    step = 0
    log.start(mlperf.RUN_START)
    started = time.perf_counter()
    reached = False
    quality: dict[str, float] = {}
    for epoch in range(1, target.max_epochs + 1):
        log.start(mlperf.EPOCH_START, metadata={"epoch_num": epoch})
        for inputs, targets in train.batches(spec.batch_per_rank, generator, shard=shard):
            inputs, targets = trainer.to_device(inputs, targets)
            timer.start()
            losses[step] = trainer.step(inputs, targets)
            timer.stop()
            _end_step(trainer)
            step += 1
            progress("train", step, total_steps)
        log.end(mlperf.EPOCH_STOP, metadata={"epoch_num": epoch})
        epoch_losses = [float(v) for v in losses[step - steps_per_epoch:step].cpu()]
        check_finite(epoch_losses, step - len(epoch_losses))
        if epoch % target.eval_every_epochs and epoch != target.max_epochs:
            continue
        progress("eval", epoch, target.max_epochs)
        log.start(mlperf.EVAL_START, metadata={"epoch_num": epoch})
        with _outside(trainer, "evaluation"):
            evaluated = trainer.strategy.model_to_evaluate()
            quality = trainer.workload.evaluate(evaluated, evaluation, spec.batch_per_rank * 4,
                                                device, trainer.autocast)
        log.end(mlperf.EVAL_STOP, metadata={"epoch_num": epoch})
        value = quality[target.metric]
        log.event(mlperf.EVAL_ACCURACY, value, metadata={"epoch_num": epoch,
                                                         "metric": target.metric})
        result.quality_history.append({"epoch": epoch, "step": step,
                                       "seconds": time.perf_counter() - started, **quality})
        with _outside(trainer, "stop decision"):
            stop = trainer.strategy.agree_to_stop(target.reached(value))
        if stop:
            reached = True
            break
    elapsed = time.perf_counter() - started
    log.end(mlperf.RUN_STOP, metadata={"status": mlperf.STATUS_SUCCESS if reached
                                       else mlperf.STATUS_ABORTED})
    energy.close(result, step)  # evaluations included, as in time_to_train
    result.peak_memory = backend.peak_memory(device)  # before the probe (see run_throughput)
    result.memory = backend.memory_details(device)
    _peak_reading(trainer, result, "after")
    result.step_times = timer.samples()
    result.step_cpu_times = timer.cpu_samples()
    result.losses = [float(v) for v in losses[:step].cpu()]
    result.quality = quality
    result.target_reached = reached
    result.time_to_train = elapsed
    result.events = log.events
    _finish(trainer, result, step)
    return result
