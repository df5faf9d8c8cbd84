"""step_time (max over ranks, per step), throughput (global samples per second), cpu_time (the
CPU seconds of a step, all ranks) and, for a language model, tokens_per_s (the same rate in
tokens)."""
from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable

from harness.collectors.base import CollectContext, collector, measured
from harness.records.definitions import step_time_metric, throughput_metric
from harness.records.record import Metric


def per_step(per_rank: list[list[float]], combine: Callable[[Iterable[float]], float]
             ) -> list[float]:
    """Each step's readings across ranks combined, over the steps every rank has."""
    steps = min((len(times) for times in per_rank), default=0)
    return [combine(times[i] for times in per_rank) for i in range(steps)]


def step_times_over_ranks(context: CollectContext) -> list[float]:
    """A step ends when the slowest rank ends it: the per-step maximum across ranks."""
    return per_step([r.step_times for r in context.ranks if r.step_times], max)


@collector("step_time")
def step_time(context: CollectContext) -> list[Metric]:
    times = step_times_over_ranks(context)
    if not times:
        return []
    return [step_time_metric(times, extra={"aggregation": "max over ranks per step; value is "
                                           "the median"})]


def _asynchronous(context: CollectContext) -> bool:
    from harness.strategies import STRATEGIES

    try:
        return not STRATEGIES.get(context.spec.strategy).synchronous
    except KeyError:
        return False


def _independent_throughput(context: CollectContext) -> list[Metric]:
    """Workers that do not wait for each other: the sum of each worker's own rate."""
    per_rank = [r.step_times for r in context.ranks if r.step_times]
    batch = context.spec.batch_per_rank
    steps = min(len(times) for times in per_rank)
    rates = [batch / statistics.median(times) for times in per_rank]
    return [measured("throughput", sum(rates),
                     samples=[sum(batch / times[i] for times in per_rank) for i in range(steps)],
                     extra={"global_batch": context.spec.global_batch, "measured_steps": steps,
                            "per_worker": rates,
                            "aggregation": "sum over workers of batch_per_rank / that "
                                           "worker's median step time (workers do not wait "
                                           "for each other)",
                            "overall": sum(batch * len(t) / sum(t) for t in per_rank)})]


@collector("throughput")
def throughput(context: CollectContext) -> list[Metric]:
    times = step_times_over_ranks(context)
    if not times:
        return []
    if _asynchronous(context):
        return _independent_throughput(context)
    global_batch = context.spec.global_batch
    # The median step is robust to a shared machine's stray slow steps; the plain
    # total-samples / total-time figure is kept beside it.
    return [throughput_metric(global_batch, times,
                              extra={"measured_steps": len(times),
                                     "overall": global_batch * len(times) / sum(times)})]


@collector("cpu_time")
def cpu_time(context: CollectContext) -> list[Metric]:
    """The CPU seconds a step costs: per step, the sum over ranks of each rank process's CPU
    time (user + system, every thread) over its timed step; the value is the median. Beside
    the wall clock it leaves out what the process did not run for (another process or the
    hypervisor on its cores, idle waits), and counts what threads spin."""
    per_rank = [r.step_cpu_times for r in context.ranks if r.step_cpu_times]
    if not per_rank or len(per_rank) < len([r for r in context.ranks if r.step_times]):
        return []  # a rank without the reading (a device timer) leaves the sum unknown
    samples = per_step(per_rank, sum)
    return [measured("cpu_time", statistics.median(samples), samples=samples,
                     extra={"ranks": len(per_rank),
                            "aggregation": "sum over ranks of each process's CPU seconds per "
                                           "step; value is the median"})]


@collector("reference_time")
def reference_time(context: CollectContext) -> list[Metric]:
    """--speed-probe: the fixed probe's seconds after each measured step (the mean over the
    ranks that timed it), the machine's speed beside each step; the value is the median."""
    per_rank = [r.probe_times for r in context.ranks if r.probe_times]
    if not per_rank:
        return []
    samples = per_step(per_rank, statistics.fmean)
    return [measured("reference_time", statistics.median(samples), samples=samples,
                     extra={"ranks": len(per_rank),
                            "aggregation": "mean over ranks of the probe timed after each "
                                           "step; value is the median"})]


@collector("first_step_time")
def first_step_time(context: CollectContext) -> list[Metric]:
    """The first warm-up step of the slowest rank: it holds torch.compile's compilation and
    IPEX's first rewrite, which the measured steps leave out."""
    firsts = [r.warmup_times[0] for r in context.ranks if r.warmup_times]
    if not firsts:
        return []
    warmed = max(len(r.warmup_times) for r in context.ranks)
    return [measured("first_step_time", max(firsts),
                     extra={"warmup_steps": warmed, "warmup_requested": context.spec.warmup,
                            "aggregation": "max over ranks of the first warm-up step"})]


@collector("tokens_per_s", stage=1)
def tokens_per_s(context: CollectContext) -> list[Metric]:
    """throughput times the tokens a sample holds, for the workloads whose samples are token
    windows (language models); each step's rate a sample, as for throughput."""
    from workloads import WORKLOADS, get_workload

    rate = context.get("throughput")
    if rate is None or rate.value is None or context.spec.workload not in WORKLOADS:
        return []
    tokens = get_workload(context.spec.workload).tokens_per_sample(context.spec.size)
    if not tokens:
        return []
    return [measured("tokens_per_s", rate.value * tokens,
                     samples=[s * tokens for s in rate.samples or []] or None,
                     extra={"tokens_per_sample": tokens,
                            "aggregation": "throughput x tokens per sample"})]
