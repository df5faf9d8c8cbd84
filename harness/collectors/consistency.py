"""What asynchronous strategies add (docs/spec/metrics.md): the staleness of applied updates, the
servers' update rate, each worker's own throughput, and the share of its step a worker spent
waiting on the servers."""
from __future__ import annotations

import statistics

from harness.collectors.base import CollectContext, collector, measured
from harness.core.stats import quantile
from harness.records.record import Metric


@collector("staleness")
def staleness(context: CollectContext) -> list[Metric]:
    """Server version minus the version each applied gradient was computed at, every update
    of every server (raw samples kept)."""
    servers = [r for r in context.ranks if "staleness" in r.strategy_stats]
    if not servers:
        return []
    samples = sorted(float(v) for r in servers for v in r.strategy_stats["staleness"])
    found = []
    if samples:
        found.append(measured("staleness", statistics.fmean(samples),
                              samples=samples,
                              extra={"p50": quantile(samples, 0.5),
                                     "p99": quantile(samples, 0.99), "max": samples[-1],
                                     "by_worker": servers[0].strategy_stats.get(
                                         "staleness_by_worker", {}),
                                     "aggregation": "mean over every applied gradient of "
                                                    "every server",
                                     # stale gradients applied at 1/(1 + staleness) of the rate
                                     "damp_stale": servers[0].strategy_stats.get(
                                         "damp_stale", False),
                                     # the servers' SGD momentum (None: not an SGD optimizer)
                                     "server_momentum": servers[0].strategy_stats.get(
                                         "momentum")}))
    lost = [entry for r in servers[:1] for entry in r.strategy_stats.get("lost", [])]
    if lost:
        found.append(measured("lost_workers", float(len(lost)),
                              extra={"lost": lost, "note": "workers that died mid-run; the "
                                     "others finished the run without them"}))
    rates = [float(r.strategy_stats.get("updates_per_s", 0.0)) for r in servers]
    found.append(measured("updates_per_s", statistics.fmean(rates),
                          extra={"per_server": rates, "updates": [r.strategy_stats.get("updates")
                                                                  for r in servers]}))
    return found


@collector("wait_fraction")
def wait_fraction(context: CollectContext) -> list[Metric]:
    """Per worker: seconds blocked fetching from the servers over its step time."""
    workers = [r for r in context.ranks if r.role != "server" and r.step_times
               and any("wait" in step for step in r.phase_times)]
    if not workers:
        return []
    shares = [sum(step.get("wait", 0.0) for step in r.phase_times) / sum(r.step_times)
              for r in workers]
    return [measured("wait_fraction", max(shares),
                     extra={"per_worker": shares,
                            "aggregation": "max over workers of wait / step time"})]


@collector("portions")
def portions(context: CollectContext) -> list[Metric]:
    """Sandblaster's coordinator: portions computed again (backup copies and a lost replica's
    portions), which copies won, and what each replica did."""
    coordinators = [r for r in context.ranks if "portions_by_worker" in r.strategy_stats]
    if not coordinators:
        return []
    stats = coordinators[0].strategy_stats
    rerun = stats["backups_issued"] + stats["reassigned_portions"]
    found = [measured("portions_rerun", float(rerun),
                      extra={key: value for key, value in stats.items() if key != "lost"})]
    if stats.get("lost"):
        found.append(measured("lost_workers", float(len(stats["lost"])),
                              extra={"lost": stats["lost"], "note": "replicas that died "
                                     "mid-run; the others finished every batch without them"}))
    return found
