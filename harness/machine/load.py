"""How busy the machine was while a run measured: the load average before and after, the CPU
time other processes took during the run (all CPU time in /proc/stat less this process's and
its reaped children's, that is the supervisor's and its ranks'), and steal time where the
kernel reports it (a hypervisor running other guests on our cores).

A run is marked busy when other processes took more than BUSY_OTHER_SHARE of the cores the
run used (beyond the cores it left free), or steal took more than BUSY_STEAL_SHARE of the
machine's CPU time: a synchronous step waits for its slowest thread, so a tenth of the run's
cores taken by others slows every step by up to a tenth, more than the run-to-run noise that
compare's threshold admits.
"""
from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BUSY_OTHER_SHARE = 0.10
BUSY_STEAL_SHARE = 0.05
# /proc/stat's cpu line: user nice system idle iowait irq softirq steal guest guest_nice
_BUSY_FIELDS = (0, 1, 2, 5, 6)  # guest time is already inside user
_STEAL_FIELD = 7


@dataclass(frozen=True)
class CpuSample:
    """A moment's counters: the machine's busy, steal and total CPU seconds, ours, the time."""

    busy_s: float
    steal_s: float
    total_s: float
    own_s: float
    wall_s: float
    loadavg: tuple[float, float, float] | None


def _proc_stat(proc: Path) -> tuple[float, float, float] | None:
    try:
        first = (proc / "stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    if first[0] != "cpu":
        return None
    ticks = [int(v) for v in first[1:]]
    hertz = os.sysconf("SC_CLK_TCK")
    busy = sum(ticks[i] for i in _BUSY_FIELDS if i < len(ticks))
    steal = ticks[_STEAL_FIELD] if len(ticks) > _STEAL_FIELD else 0
    return busy / hertz, steal / hertz, sum(ticks[:8]) / hertz


def sample(proc: Path = Path("/proc")) -> CpuSample | None:
    """The counters now, or None where /proc/stat cannot be read (not Linux)."""
    found = _proc_stat(proc)
    if found is None:
        return None
    mine = os.times()
    try:
        loadavg: tuple[float, float, float] | None = os.getloadavg()
    except OSError:
        loadavg = None
    return CpuSample(*found, own_s=mine.user + mine.system + mine.children_user
                     + mine.children_system, wall_s=time.monotonic(), loadavg=loadavg)


def load_between(before: CpuSample | None, after: CpuSample | None,
                 run_cores: float | None = None) -> dict[str, Any] | None:
    """The record's `load`: what the machine did between two samples, and the busy mark.

    `run_cores` is the CPU threads the run's processes on this machine asked for. Others
    disturb the run only where they need more cores than the run left free: 6 busy cores of a
    64-core host beside a 4-thread run take nothing from it, while a tenth of a core taken
    from a run that uses every core slows each of its synchronous steps. So the mark counts
    the others' average cores beyond the free ones, as a share of the run's; unknown
    `run_cores` counts the run as using every core (the others' share of the machine).
    """
    if before is None or after is None or after.total_s <= before.total_s:
        return None
    total = after.total_s - before.total_s
    wall = after.wall_s - before.wall_s
    own = max(0.0, after.own_s - before.own_s)
    other = max(0.0, (after.busy_s - before.busy_s) - own)
    other_share = other / total
    steal_share = max(0.0, after.steal_s - before.steal_s) / total
    cpus = max(1, round(total / wall)) if wall > 0 else None
    used = min(run_cores, cpus) if run_cores and cpus else cpus
    if cpus is not None and used:
        on_run = max(0.0, other / wall - (cpus - used)) / used
    else:
        on_run = other_share
    reasons = []
    if on_run > BUSY_OTHER_SHARE:
        where = (f"of the {used:g} of {cpus} cores the run used" if cpus and used < cpus
                 else "of the CPU time")
        reasons.append(f"other processes took {on_run:.0%} {where} "
                       f"(threshold {BUSY_OTHER_SHARE:.0%})")
    if steal_share > BUSY_STEAL_SHARE:
        reasons.append(f"steal took {steal_share:.0%} (threshold {BUSY_STEAL_SHARE:.0%})")
    return {"wall_s": round(wall, 3),
            "loadavg_before": list(before.loadavg) if before.loadavg else None,
            "loadavg_after": list(after.loadavg) if after.loadavg else None,
            "own_cpu_s": round(own, 3), "other_cpu_s": round(other, 3),
            "other_cpu_share": round(other_share, 4), "steal_share": round(steal_share, 4),
            "cpus": cpus, "run_cores": used, "other_share_of_run_cores": round(on_run, 4),
            "busy": bool(reasons), "busy_reason": "; ".join(reasons) or None}


def is_busy(record: Mapping[str, Any]) -> bool:
    """Whether a record says its machine was busy while it measured (records from before
    `load` say nothing, and are not marked)."""
    load = record.get("load")
    return isinstance(load, dict) and load.get("busy") is True


def is_imprecise(record: Mapping[str, Any]) -> bool:
    """Whether a record says its figure missed its precision target (notes.measurement)."""
    notes = record.get("notes")
    account = notes.get("measurement") if isinstance(notes, dict) else None
    return isinstance(account, dict) and account.get("target_met") is False


def marked_status(record: Mapping[str, Any]) -> str:
    """The status as every table shows it (run summary, report): a busy machine's figures and
    figures that missed their precision target are marked, so no table shows them as a quiet,
    precise run's."""
    status = str(record.get("status"))
    marks = [mark for mark, found in (("busy", is_busy(record)),
                                      ("imprecise", is_imprecise(record))) if found]
    return f"{status} ({', '.join(marks)})" if marks else status
