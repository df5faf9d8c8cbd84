"""A GPU rank's cores: those of its GPU's NUMA node, shared out among the node's GPUs there.

A rank whose threads run on the other socket reaches its GPU and its pinned host buffers over
the socket interconnect. torchrun (2.9 and later) binds its workers itself
(`--numa-binding exclusive`, through numactl); under mpirun, srun and dtbench's own launcher
each GPU rank binds itself here, the same way: the NUMA node of its GPU's PCI device
(`/sys/bus/pci/devices/<address>/numa_node`), that node's CPUs the process may use, divided by
whole cores (SMT siblings kept together) among the visible GPUs on that node, the lowest GPU
first; a GPU whose node sysfs does not say leaves the rank where it was, with the reason.
Memory follows: first-touch allocation places a bound thread's pages on its node."""
from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# Set in a rank's environment by a launcher that bound it already (its value says how).
BOUND_BY_VAR = "DTBENCH_CPU_BINDING"


def parse_cpulist(text: str) -> set[int]:
    """The kernel's CPU list ("0-3,8,10-11") as a set."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        first, _, last = part.strip().partition("-")
        if first.isdigit() and (not last or last.isdigit()):
            cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def format_cpulist(cpus: set[int] | Sequence[int]) -> str:
    """A set of CPUs in the kernel's list form, ranges joined: {0, 1, 2, 5} -> "0-2,5"."""
    ordered = sorted(cpus)
    parts: list[str] = []
    start = previous = None
    for cpu in [*ordered, None]:
        if cpu is not None and previous is not None and cpu == previous + 1:
            previous = cpu
            continue
        if start is not None:
            parts.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = cpu
    return ",".join(parts)


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def pci_numa_node(pci_address: str, sys_root: Path = Path("/sys")) -> int | None:
    """The NUMA node of a PCI device ("0000:1b:00.0"); None where sysfs does not say (-1 on a
    machine without NUMA, or no such file)."""
    text = _read(sys_root / "bus/pci/devices" / pci_address.lower() / "numa_node")
    if text is None or not text.lstrip("-").isdigit() or int(text) < 0:
        return None
    return int(text)


def node_cpus(node: int, sys_root: Path = Path("/sys")) -> set[int]:
    text = _read(sys_root / f"devices/system/node/node{node}/cpulist")
    return parse_cpulist(text) if text else set()


def _core_of(cpu: int, sys_root: Path) -> int:
    """A physical core, named by the lowest logical CPU on it."""
    text = _read(sys_root / f"devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
    siblings = parse_cpulist(text) if text else set()
    return min(siblings | {cpu})


def gpu_cpus(gpu: int, pci_addresses: Sequence[str], allowed: set[int],
             sys_root: Path = Path("/sys")) -> tuple[set[int] | None, dict[str, Any]]:
    """The CPUs for the rank of visible GPU `gpu` (`pci_addresses`: every visible GPU's, in
    CUDA's order), out of `allowed`; None and the reason where it stays as it is."""
    nodes = [pci_numa_node(address, sys_root) for address in pci_addresses]
    mine = nodes[gpu] if gpu < len(nodes) else None
    if mine is None:
        return None, {"reason": "sysfs gives no NUMA node for the GPU (one node, or a VM)"}
    pool = node_cpus(mine, sys_root) & allowed
    if not pool:
        return None, {"numa_node": mine, "reason": f"no CPU of NUMA node {mine} is allowed to "
                      f"this process (allowed: {format_cpulist(allowed)})"}
    cores: dict[int, set[int]] = {}
    for cpu in pool:
        cores.setdefault(_core_of(cpu, sys_root), set()).add(cpu)
    sharing = [index for index, node in enumerate(nodes) if node == mine]
    share, extra = divmod(len(cores), len(sharing))
    place = sharing.index(gpu)
    if share == 0:  # more GPUs than cores on the node: they share them all
        return pool, {"numa_node": mine, "gpus_on_node": len(sharing),
                      "reason": "fewer cores than GPUs on the node: shared"}
    first = place * share + min(place, extra)
    chosen = sorted(cores)[first:first + share + (1 if place < extra else 0)]
    return set().union(*(cores[core] for core in chosen)), {
        "numa_node": mine, "gpus_on_node": len(sharing), "cores": len(chosen)}


def bind_threads(cpus: set[int]) -> None:
    """Every thread of this process onto `cpus` (threads started later inherit it)."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    for task in os.listdir("/proc/self/task"):
        try:
            if os.sched_getaffinity(int(task)) == before:
                os.sched_setaffinity(int(task), cpus)
        except OSError:  # a thread that has exited
            continue


def bind_gpu_rank(gpu: int, pci_addresses: Sequence[str], sys_root: Path = Path("/sys"),
                  environ: dict[str, str] | None = None) -> dict[str, Any]:
    """Bind this process to its GPU's share of the NUMA node (unless its launcher did);
    what the record keeps of it: the CPUs, the node, who bound them, or why not."""
    env = os.environ if environ is None else environ
    allowed = os.sched_getaffinity(0)
    if env.get(BOUND_BY_VAR):
        return {"by": env[BOUND_BY_VAR], "cpus": format_cpulist(allowed)}
    cpus, why = gpu_cpus(gpu, pci_addresses, allowed, sys_root)
    if cpus is None:
        return {"by": None, "cpus": format_cpulist(allowed), **why}
    if cpus != allowed:
        bind_threads(cpus)
    return {"by": "dtbench", "cpus": format_cpulist(cpus), **why}
