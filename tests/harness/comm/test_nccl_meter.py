"""NCCL's traffic is counted by the same wrapper as gloo's and MPI's. Without a GPU the wrapped
group is torch's fake process group (it moves nothing) and the registration is made for the
CPU: what is exercised is the path a rank takes (the backend registered for NCCL, the group
torch builds from it, every collective reaching the wrapper, object collectives and barriers
finding their device), not NCCL itself."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.distributed as dist

from harness.comm import meter as meter_module
from harness.comm.inner import Counted
from harness.comm.meter import CommMeter, CountingProcessGroup, register_counted_backend
from harness.facts.traffic import wire_bytes


@pytest.fixture
def nccl_on_a_fake_group(monkeypatch: pytest.MonkeyPatch) -> Iterator[CommMeter]:
    from torch._C._distributed_c10d import FakeProcessGroup
    from torch.testing._internal.distributed.fake_pg import FakeStore

    made: list[Any] = []

    def fake(options: Any, backend_options: Any) -> Any:
        made.append(options.timeout)
        return FakeProcessGroup._create_internal(options.group_rank, options.group_size)

    monkeypatch.setitem(meter_module.COUNTED, "nccl",
                        Counted("dtbench_nccl", ("cpu",), fake))
    meter = CommMeter()
    name = register_counted_backend("nccl", meter)
    assert name == "dtbench_nccl"
    dist.init_process_group(name, store=FakeStore(), rank=1, world_size=4)
    try:
        assert made, "the NCCL group was not made by the registered creator"
        yield meter
    finally:
        dist.destroy_process_group()


def test_every_nccl_collective_is_counted_as_the_ring_sends_it(
        nccl_on_a_fake_group: CommMeter) -> None:
    meter = nccl_on_a_fake_group
    group = dist.group.WORLD
    assert isinstance(group, CountingProcessGroup)
    dist.all_reduce(torch.ones(1000))
    # the spellings torch has had since 2.0 (all_gather_single is 2.13's, absent in 2.11)
    dist.all_gather_into_tensor(torch.empty(4000), torch.ones(1000))
    dist.reduce_scatter_tensor(torch.empty(1000), torch.ones(4000))
    dist.broadcast(torch.ones(1000), src=0)
    expected = (wire_bytes("allreduce", 4000, 4, "nccl", rank=1)
                + wire_bytes("allgather", 16000, 4, "nccl", rank=1)
                + wire_bytes("reducescatter", 16000, 4, "nccl", rank=1)
                + wire_bytes("broadcast", 4000, 4, "nccl", rank=1, root=0))
    assert meter.total["wire"] == expected > 0
    assert meter.calls == {"allreduce": 1, "allgather": 1, "reducescatter": 1, "broadcast": 1}


def test_object_collectives_use_the_registered_device(nccl_on_a_fake_group: CommMeter) -> None:
    """torch picks the device of all_gather_object (how ranks gather their results) from the
    backends registered on the group: NCCL's, not the CPU a bare wrapper would give."""
    group = dist.group.WORLD
    assert group._device_types == [torch.device("cpu")]  # "cuda" on a real node
    gathered: list[Any] = [None] * 4
    dist.all_gather_object(gathered, {"rank": 1})
    assert gathered[1] == {"rank": 1}
    assert nccl_on_a_fake_group.calls.get("allgather", 0) >= 1


class _Recorder:
    def __init__(self) -> None:
        self.barriers: list[Any] = []

    def barrier(self, opts: Any = None) -> str:
        self.barriers.append(list(opts.device_ids))
        return "done"


def test_every_nccl_group_keeps_the_ranks_bound_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch sets `bound_device_id` on a placeholder group it then discards for the counting
    wrapper: the wrapper carries it itself, for the default group and for every group made
    later, so barriers name the device and new_group can split the default communicator
    (torch looks the backend up by the bound device: found here)."""
    from torch._C._distributed_c10d import FakeProcessGroup
    from torch.distributed.distributed_c10d import _get_default_group
    from torch.testing._internal.distributed.fake_pg import FakeStore

    def fake(options: Any, backend_options: Any) -> Any:
        return FakeProcessGroup._create_internal(options.group_rank, options.group_size)

    monkeypatch.setitem(meter_module.COUNTED, "nccl",
                        Counted("dtbench_nccl", ("cpu", "cuda"), fake))
    gpu = torch.device("cuda", 2)
    name = register_counted_backend("nccl", CommMeter(), gpu)
    dist.init_process_group(name, store=FakeStore(), rank=1, world_size=4)
    try:
        world = _get_default_group()
        assert isinstance(world, CountingProcessGroup) and world.bound_device_id == gpu
        assert world._get_backend(gpu) is world.inner  # what split_group splits
        subgroup = dist.new_group([0, 1, 2, 3])
        assert isinstance(subgroup, CountingProcessGroup) and subgroup.bound_device_id == gpu
    finally:
        dist.destroy_process_group()
    # a gloo or MPI group has no device to bind
    register_counted_backend("gloo", CommMeter(), gpu)
    assert meter_module._TARGET.device is None


def test_an_nccl_barrier_names_the_bound_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    recorder = _Recorder()
    group = CountingProcessGroup(recorder, 1, 4, CommMeter(), "dtbench_nccl", "nccl")
    group.bound_device_id = torch.device("cuda", 2)
    group.barrier()
    assert recorder.barriers == [[2]]


def test_an_nccl_barrier_names_this_ranks_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """ProcessGroupNCCL guesses a barrier's GPU from the rank when none is named (the device of
    another rank under per-task GPU binding); the wrapper names the current one."""
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    recorder = _Recorder()
    group = CountingProcessGroup(recorder, 1, 4, CommMeter(), "dtbench_nccl", "nccl")
    assert group.barrier() == "done"
    given = dist.BarrierOptions()
    given.device_ids = [1]
    group.barrier(given)
    assert recorder.barriers == [[3], [1]]
    gloo = CountingProcessGroup(recorder, 1, 4, CommMeter(), "dtbench_gloo", "gloo")
    gloo.barrier(dist.BarrierOptions())
    assert recorder.barriers[-1] == []
