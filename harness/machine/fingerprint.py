"""One function each for the machine and the software fingerprint of a record."""
from __future__ import annotations

import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import psutil
import torch

import harness
from harness.machine.hardware import cpu_fingerprint, hardware_key, machine_id
from harness.machine.names import microarchitecture


def shaped_rate_mbps(interface: str) -> float | None:
    """The rate a token-bucket filter (`tc qdisc ... tbf rate R`) caps `interface` at, in
    Mbit/s, or None (no tbf, no `tc`, or it failed): a capped link reports its NIC speed."""
    if shutil.which("tc") is None:
        return None
    try:
        shown = subprocess.run(["tc", "-j", "qdisc", "show", "dev", interface],
                               capture_output=True, text=True, timeout=5, check=False)
        qdiscs = json.loads(shown.stdout) if shown.returncode == 0 else []
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    rates = [q["options"]["rate"] for q in qdiscs if isinstance(q, dict) and q.get("kind") == "tbf"
             and isinstance(q.get("options"), dict)
             and isinstance(q["options"].get("rate"), (int, float))]
    return min(rates) * 8 / 1e6 if rates else None


def interconnect() -> dict[str, Any] | None:
    """InfiniBand devices if any, else the Ethernet link the ranks use (GLOO_SOCKET_IFNAME where
    set and up, else the fastest up link): its speed, and the tbf cap on it where one is set."""
    ib = Path("/sys/class/infiniband")
    if ib.is_dir() and any(ib.iterdir()):
        return {"type": "infiniband", "devices": sorted(p.name for p in ib.iterdir())}
    best: dict[str, Any] | None = None
    chosen = os.environ.get("GLOO_SOCKET_IFNAME", "").split(",")[0]
    for name, stats in psutil.net_if_stats().items():
        if name == "lo" or not stats.isup:
            continue
        if name == chosen:
            best = {"interface": name, "speed": stats.speed}
            break
        if best is None or stats.speed > best["speed"]:
            best = {"interface": name, "speed": stats.speed}
    if best is None:
        return None
    found: dict[str, Any] = {"type": "ethernet", "interface": best["interface"],
                             "speed_mbps": best["speed"] or None}
    capped = shaped_rate_mbps(best["interface"])
    if capped is not None:
        found["tbf_mbps"] = round(capped, 3)
    return found


def machine_info() -> dict[str, Any]:
    """This node's fingerprint (docs/spec/record.md): identity, the CPU in detail, memory, GPUs,
    interconnect, and the ISA oneDNN dispatches to. A record of a multi-node run also lists
    every node's (`per_node`, see node_summary)."""
    from backends.cpu import onednn_isa
    from backends.gpu_topology import gpu_topology
    from backends.nvml import gpu_inventory

    cpu = cpu_fingerprint()
    gpus = gpu_inventory()
    return with_hardware_key({
        "machine_id": machine_id(),
        "hardware_key": "",  # filled in below, from the fields it hashes
        "hostname": socket.gethostname(),
        "os": os_name(),
        "kernel": platform.release(),
        "arch": platform.machine(),
        **cpu,
        "cpu_cores": psutil.cpu_count(logical=False) or os.cpu_count(),
        "cpu_threads": psutil.cpu_count(logical=True),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "ram_bytes": psutil.virtual_memory().total,
        "onednn_isa": onednn_isa(),
        "gpus": gpus,
        "gpu_topology": gpu_topology() if gpus else None,
        "nodes": 1,
        "interconnect": interconnect(),
        "microarchitecture": microarchitecture(cpu),
    })


def with_hardware_key(machine: dict[str, Any]) -> dict[str, Any]:
    """The machine entry with its hardware_key set (the hash of its hardware fields)."""
    return {**machine, "hardware_key": hardware_key(machine)}


def node_summary(machine: dict[str, Any], env: dict[str, str] | None = None
                 ) -> dict[str, Any]:
    """What a multi-node record keeps of each node: host, hardware key, the CPU fields and the
    environment variables that change performance as that node's ranks saw them (`env`; the
    spec's `env` is the launching node's)."""
    keep = ("hostname", "hardware_key", "cpu_vendor", "cpu_model", "cpu_family",
            "cpu_model_number", "cpu_stepping", "cpu_microcode", "cpus_usable", "ram_bytes",
            "isa_flags", "onednn_isa", "gpus", "gpu_topology", "interconnect")
    return {**{key: machine.get(key) for key in keep}, "env": dict(env or {})}


def os_name() -> str:
    try:
        release = platform.freedesktop_os_release().get("PRETTY_NAME")
    except OSError:
        release = None
    return f"{platform.system()} ({release})" if release else platform.system()


@cache
def mpi_version() -> dict[str, str] | None:
    """The MPI implementation mpi4py is linked against, without initialising MPI here (asked
    of a child process once per process: every record carries it)."""
    from backends.base import module_available

    if not module_available("mpi4py"):
        return None
    code = ("import mpi4py; mpi4py.rc.initialize = False; from mpi4py import MPI; "
            "print(MPI.Get_library_version().splitlines()[0]); print(mpi4py.__version__)")
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=30, check=True).stdout.splitlines()
    except (subprocess.SubprocessError, OSError):
        return {"implementation": "unknown", "mpi4py": "import failed"}
    # Open MPI's version string ends in a NUL byte; records keep printable text only.
    clean = ["".join(c for c in line if c.isprintable()).strip() for line in out]
    return {"implementation": clean[0] if clean and clean[0] else "unknown",
            "mpi4py": clean[1] if len(clean) > 1 and clean[1] else "unknown"}


def _package_version(name: str) -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def software_info(include_mpi: bool = True) -> dict[str, Any]:
    from backends.cpu import library_versions

    nccl = None
    if torch.cuda.is_available():
        try:
            nccl = ".".join(map(str, torch.cuda.nccl.version()))
        except (RuntimeError, AttributeError):
            nccl = None
    libs = library_versions()
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "onednn": libs["onednn"],
        "mkl": libs["mkl"],
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "nccl": nccl,
        "mpi": mpi_version() if include_mpi else None,
        "numpy": _package_version("numpy"),
        "mlperf_logging": _package_version("mlperf-logging"),
        "ipex": _package_version("intel-extension-for-pytorch"),
    }


def _git(root: Path, *args: str, env: dict[str, str] | None = None) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                          timeout=30, check=True, env=env).stdout.strip()


def working_tree_hash(root: Path) -> str | None:
    """The git tree of the files as they are: tracked and untracked files that git does not
    ignore, as `git add -A; git write-tree` would record them, computed in a scratch index
    and object directory (the checkout's index and objects are left as they are). Equal to
    `git rev-parse COMMIT^{tree}` exactly when the files are that commit's."""
    try:
        index = Path(_git(root, "rev-parse", "--path-format=absolute", "--git-path", "index"))
        objects = _git(root, "rev-parse", "--path-format=absolute", "--git-path", "objects")
        with tempfile.TemporaryDirectory(prefix="dtbench-tree-") as scratch:
            env = {**os.environ, "GIT_INDEX_FILE": str(Path(scratch) / "index"),
                   "GIT_OBJECT_DIRECTORY": str(Path(scratch) / "objects"),
                   "GIT_ALTERNATE_OBJECT_DIRECTORIES": objects}
            Path(env["GIT_OBJECT_DIRECTORY"]).mkdir()
            if index.is_file():  # its stat data spares hashing unchanged files again
                shutil.copyfile(index, env["GIT_INDEX_FILE"])
            _git(root, "add", "-A", env=env)
            return _git(root, "write-tree", env=env) or None
    except (subprocess.SubprocessError, OSError):
        return None


@cache
def harness_info() -> dict[str, Any]:
    """The dtbench that ran: its version, the checkout's commit, whether tracked files differ
    from it, and the tree hash of the files that ran (`git_tree`, see working_tree_hash)."""
    root = Path(harness.__file__).resolve().parent.parent
    commit, dirty = None, None
    try:
        commit = _git(root, "rev-parse", "HEAD") or None
        dirty = bool(_git(root, "status", "--porcelain", "--untracked-files=no"))
    except (subprocess.SubprocessError, OSError):
        pass
    return {"version": harness.__version__, "git_commit": commit, "dirty": dirty,
            "git_tree": working_tree_hash(root) if commit else None}


def with_nodes(machine: dict[str, Any], nnodes: int,
               nodes: list[dict[str, Any] | None]) -> dict[str, Any]:
    """Node 0's machine entry, with the node count and, for a multi-node run, every node's
    summary as its first rank reported it (`per_node`)."""
    if nnodes <= 1:
        return machine
    found = [node for node in nodes if isinstance(node, dict)]
    return {**machine, "nodes": nnodes, "per_node": found,
            "same_hardware": len({n.get("hardware_key") for n in found}) <= 1}
