"""What the hardware is, read from procfs and sysfs: no torch, no measurement."""
from __future__ import annotations

import hashlib
import platform
import re
import socket
from functools import cache
from pathlib import Path


@cache
def cpu_model() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
        match = re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE)
        if match:
            return match.group(1).strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@cache
def machine_id() -> str:
    """A stable, non-reversible id of this machine (hash of /etc/machine-id, else host+cpu)."""
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            raw = Path(path).read_text().strip()
            if raw:
                return hashlib.sha256(raw.encode()).hexdigest()[:16]
        except OSError:
            continue
    return hashlib.sha256(f"{socket.gethostname()}|{cpu_model()}".encode()).hexdigest()[:16]


@cache
def cpu_flags() -> frozenset[str]:
    """The ISA flags of /proc/cpuinfo (empty where it cannot be read)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    match = re.search(r"^flags\s*:\s*(.*)$", text, re.MULTILINE)
    return frozenset(match.group(1).split()) if match else frozenset()
