"""A GPU rank's cores from generated sysfs trees: its GPU's NUMA node, shared by whole cores
among the node's GPUs, within the CPUs the process may use; mocked, not measured."""
from __future__ import annotations

from pathlib import Path

import pytest

from backends import numa

# Two sockets, one NUMA node each, 8 cores with SMT per node; GPUs 0-1 on node 0, 2-3 on node 1.
GPUS = ["0000:1b:00.0", "0000:3b:00.0", "0000:8b:00.0", "0000:BB:00.0"]


def sysfs(root: Path, gpu_nodes: tuple[int, ...] = (0, 0, 1, 1)) -> Path:
    for address, node in zip(GPUS, gpu_nodes, strict=True):
        device = root / "bus/pci/devices" / address.lower()
        device.mkdir(parents=True)
        (device / "numa_node").write_text(f"{node}\n")
    for node, cpus in ((0, "0-7,16-23"), (1, "8-15,24-31")):
        path = root / f"devices/system/node/node{node}"
        path.mkdir(parents=True)
        (path / "cpulist").write_text(cpus + "\n")
    for cpu in range(32):
        topology = root / f"devices/system/cpu/cpu{cpu}/topology"
        topology.mkdir(parents=True)
        core = cpu % 16
        (topology / "thread_siblings_list").write_text(f"{core},{core + 16}\n")
    return root


def test_cpu_lists_read_and_write_as_the_kernel_spells_them() -> None:
    assert numa.parse_cpulist("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert numa.format_cpulist({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8"
    assert numa.format_cpulist(set()) == ""


def test_each_gpu_takes_its_share_of_its_nodes_cores_siblings_together(tmp_path: Path) -> None:
    root = sysfs(tmp_path)
    everything = set(range(32))
    shares = [numa.gpu_cpus(gpu, GPUS, everything, root) for gpu in range(4)]
    assert [cpus for cpus, _ in shares] == [{0, 1, 2, 3, 16, 17, 18, 19},
                                            {4, 5, 6, 7, 20, 21, 22, 23},
                                            {8, 9, 10, 11, 24, 25, 26, 27},
                                            {12, 13, 14, 15, 28, 29, 30, 31}]
    assert shares[2][1] == {"numa_node": 1, "gpus_on_node": 2, "cores": 4}


def test_only_the_cpus_the_process_may_use_are_shared(tmp_path: Path) -> None:
    """A cgroup or srun allocation that gives the job 4 cores of node 0."""
    root = sysfs(tmp_path)
    allowed = {0, 1, 2, 3, 16, 17, 18, 19}
    assert numa.gpu_cpus(0, GPUS, allowed, root)[0] == {0, 1, 16, 17}
    assert numa.gpu_cpus(1, GPUS, allowed, root)[0] == {2, 3, 18, 19}
    cpus, why = numa.gpu_cpus(2, GPUS, allowed, root)
    assert cpus is None and "no CPU of NUMA node 1" in why["reason"]


def test_uneven_shares_go_to_the_lowest_gpus_first(tmp_path: Path) -> None:
    root = sysfs(tmp_path, gpu_nodes=(0, 0, 0, 1))
    sizes = [len(numa.gpu_cpus(gpu, GPUS, set(range(32)), root)[0] or ()) // 2 for gpu in range(3)]
    assert sizes == [3, 3, 2]


def test_a_gpu_without_a_numa_node_stays_where_it_is(tmp_path: Path) -> None:
    root = sysfs(tmp_path, gpu_nodes=(-1, -1, -1, -1))
    cpus, why = numa.gpu_cpus(0, GPUS, set(range(32)), root)
    assert cpus is None and "no NUMA node" in why["reason"]


def test_a_rank_binds_itself_unless_its_launcher_did(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    root = sysfs(tmp_path)
    bound: list[set[int]] = []
    monkeypatch.setattr(numa.os, "sched_getaffinity", lambda pid: set(range(32)))
    monkeypatch.setattr(numa, "bind_threads", bound.append)
    made = numa.bind_gpu_rank(3, GPUS, root, environ={})
    assert bound == [{12, 13, 14, 15, 28, 29, 30, 31}]
    assert made == {"by": "dtbench", "cpus": "12-15,28-31", "numa_node": 1, "gpus_on_node": 2,
                    "cores": 4}
    by_torchrun = numa.bind_gpu_rank(3, GPUS, root, environ={
        numa.BOUND_BY_VAR: "torchrun --numa-binding exclusive"})
    assert by_torchrun["by"] == "torchrun --numa-binding exclusive" and len(bound) == 1
