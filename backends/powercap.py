"""CPU package and DRAM energy from RAPL through Linux powercap (Intel, and AMD, which exposes
its package counters through the same zones).

Each top-level zone (`intel-rapl:N`, a package) and its `dram` subzone is a domain; the core
and uncore subzones are inside the package's figure and `psys` overlaps it, so they are left
out. A counter wraps at its zone's `max_energy_range_uj`: the meter reads every zone every
INTERVAL_S on a thread, so that no wrap between two readings is missed (Zeus does the same),
and accumulates the deltas. The root is /sys/class/powercap, or DTBENCH_POWERCAP_ROOT (tests
run on a generated tree). What the counters cover is the package and DRAM, not wall power.
"""
from __future__ import annotations

import os
import socket
import threading
from dataclasses import dataclass
from pathlib import Path

from backends.base import EnergyMeter

ROOT_VAR = "DTBENCH_POWERCAP_ROOT"
INTERVAL_S = 0.5
COVERS = ("CPU packages and DRAM as RAPL counts them (Linux powercap): not wall power, and "
          "not the fans, disks or network")


class PowercapUnavailable(RuntimeError):
    """No readable RAPL zone; the message says why."""


def powercap_root() -> Path:
    return Path(os.environ.get(ROOT_VAR) or "/sys/class/powercap")


@dataclass(frozen=True)
class Zone:
    path: Path
    name: str
    max_range_uj: int

    @property
    def key(self) -> str:
        """The domain as ranks report it: host and zone, so that the ranks of one node count
        its packages once."""
        return f"{socket.gethostname()}:{self.path.name}:{self.name}"

    def read_uj(self) -> int:
        return int((self.path / "energy_uj").read_text().strip())


def _text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def find_zones(root: Path | None = None) -> list[Zone]:
    """The package zones and their DRAM subzones under the powercap root; PowercapUnavailable
    saying why where there is none, or none this process may read (root only since
    CVE-2020-8694)."""
    root = powercap_root() if root is None else root
    candidates = sorted(p for p in root.glob("*rapl:*") if p.name.count(":") == 1)
    candidates += sorted(p for p in root.glob("*rapl:*:*")
                         if p.name.count(":") == 2 and _text(p / "name") == "dram")
    if not candidates:
        raise PowercapUnavailable(f"no RAPL energy counter on this machine (no rapl zone "
                                  f"under {root})")
    zones, unreadable = [], []
    for path in candidates:
        name = _text(path / "name") or path.name
        if name == "psys":
            continue
        maximum = _text(path / "max_energy_range_uj")
        zone = Zone(path, name, int(maximum) if maximum and maximum.isdigit() else 0)
        try:
            zone.read_uj()
        except (OSError, ValueError):
            unreadable.append(path.name)
            continue
        zones.append(zone)
    if not zones:
        raise PowercapUnavailable(f"RAPL counters present but not readable by this process "
                                  f"({', '.join(unreadable)}: root only since CVE-2020-8694)")
    return zones


class PowercapMeter(EnergyMeter):
    """Joules per domain since the meter opened, wraparound handled, read every INTERVAL_S
    on a daemon thread and at each call."""

    covers = COVERS

    def __init__(self, root: Path | None = None, interval_s: float = INTERVAL_S) -> None:
        self._zones = find_zones(root)
        self._lock = threading.Lock()
        self._last = {zone.key: zone.read_uj() for zone in self._zones}
        self._total = {zone.key: 0 for zone in self._zones}
        self.wraps = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(interval_s,), daemon=True,
                                        name="powercap-sampler")
        self._thread.start()

    def _run(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            try:
                self._sample()
            except (OSError, ValueError):  # a zone gone mid-run: the last figures stand
                return

    def _sample(self) -> None:
        with self._lock:
            for zone in self._zones:
                value = zone.read_uj()
                delta = value - self._last[zone.key]
                if delta < 0:  # wrapped past max_energy_range_uj
                    delta += zone.max_range_uj
                    self.wraps += 1
                self._total[zone.key] += delta
                self._last[zone.key] = value

    def by_domain(self) -> dict[str, float]:
        self._sample()
        with self._lock:
            return {key: uj / 1e6 for key, uj in self._total.items()}

    def joules(self) -> float:
        return sum(self.by_domain().values())

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2.0)
