"""Subgroups and batched point-to-point under NCCL, through the counting wrapper. Without a GPU
the groups are torch's fake process group and NCCL's own group class is a recorder: what is
checked is the path each rank takes through torch's c10d (distributed_c10d.py of torch 2.13),
not NCCL itself:

- a member of a new group is given the split source and colour that torch hands the
  non-members' `perform_nocolor_split` (else members initialise afresh while non-members wait
  in a split the members never join);
- a group split from a counted one (DeviceMesh's `split_group` once the default group is
  bound) counts into the same meter;
- `batch_isend_irecv` on a counted group coalesces its sends and receives (one NCCL group
  call), counting the sends;
- gossip, refused on NCCL for its unbatched point-to-point alone, is accepted."""
from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

from harness.comm import meter as meter_module
from harness.comm.meter import CommMeter, CountingProcessGroup, register_counted_backend
from harness.facts.traffic import wire_bytes

GPU = torch.device("cuda", 2)


class SplitSource:
    """Stands for the default group's NCCL backend that torch splits subgroups from."""

    supports_splitting = True

    def __init__(self) -> None:
        self.nocolor: list[Any] = []

    def perform_nocolor_split(self, device: torch.device) -> None:
        self.nocolor.append(device)


@pytest.fixture
def nccl_world(monkeypatch: pytest.MonkeyPatch) -> Iterator[SimpleNamespace]:
    """Rank 1 of 4 over the counted NCCL backend, bound to cuda:2; torch's ProcessGroupNCCL
    is a class that records the options it is built with and returns a fake group."""
    from torch._C._distributed_c10d import FakeProcessGroup
    from torch.testing._internal.distributed.fake_pg import FakeStore

    made: list[Any] = []

    class RecordingNCCL:
        class Options:
            def __init__(self) -> None:
                self.split_from: Any = None
                self.split_color: Any = None

        def __new__(cls, store: Any, rank: int, size: int, options: Any) -> Any:
            made.append(options)
            return FakeProcessGroup._create_internal(rank, size)

    monkeypatch.setattr(dist, "ProcessGroupNCCL", RecordingNCCL, raising=False)
    source = SplitSource()
    monkeypatch.setattr(c10d, "_get_split_source", lambda group: source)
    meter = CommMeter()
    name = register_counted_backend("nccl", meter, GPU)
    dist.init_process_group(name, store=FakeStore(), rank=1, world_size=4)
    try:
        yield SimpleNamespace(meter=meter, made=made, source=source,
                              world=c10d._get_default_group())
    finally:
        dist.destroy_process_group()


def test_members_of_a_new_group_split_as_torch_has_the_others_split(
        nccl_world: SimpleNamespace) -> None:
    """Rank 1 is in [0, 1] and outside [2, 3]: outside, torch calls perform_nocolor_split on
    the default group's backend; inside, the group NCCL builds must split from the same
    backend with the colour torch gives [0, 1]."""
    member = dist.new_group([0, 1])
    assert isinstance(member, CountingProcessGroup)
    options = nccl_world.made[-1]
    assert options.split_from is nccl_world.source
    assert options.split_color == c10d._process_group_color([0, 1])
    assert options.global_ranks_in_group == [0, 1]
    assert dist.new_group([2, 3]) is c10d.GroupMember.NON_GROUP_MEMBER
    assert nccl_world.source.nocolor == [GPU]
    # the default group itself splits from nothing
    assert nccl_world.made[0].split_from is None


def test_a_group_split_from_a_counted_one_counts_into_its_meter(
        nccl_world: SimpleNamespace, monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.distributed.split_group (DeviceMesh's path once the default group is bound) asks
    the parent group to split; the C++ split returns a plain group around the split backend,
    here a fake one."""
    from torch._C._distributed_c10d import FakeProcessGroup
    from torch.testing._internal.distributed.fake_pg import FakeStore

    def plain_split(self: Any, ranks: list[int], **given: Any) -> dist.ProcessGroup:
        """ProcessGroup::splitGroup as the C++ runs it: the parent's backend split (here a
        fake's), in a plain group on the parent's store."""
        assert self._get_backend(GPU) is nccl_world.world.inner
        assert self.get_group_store() is not None
        rank = sorted(ranks).index(1)
        split = dist.ProcessGroup(FakeStore(), rank, len(ranks))
        split._register_backend(GPU, dist.ProcessGroup.BackendType.CUSTOM,
                                FakeProcessGroup._create_internal(rank, len(ranks)))
        split._set_group_name(given["group_name"])
        return split

    monkeypatch.setattr(dist.ProcessGroup, "split_group", plain_split)
    split = nccl_world.world.split_group([0, 1], group_name="mesh_tp")
    assert isinstance(split, CountingProcessGroup)
    assert split.group_name == "mesh_tp" and split.size() == 2 and split.rank() == 1
    before = nccl_world.meter.total["wire"]
    split.allreduce([torch.ones(1000)])
    assert nccl_world.meter.total["wire"] - before == wire_bytes("allreduce", 4000, 2, "nccl",
                                                                 rank=1) > 0


class Coalescing:
    """A backend that coalesces (as NCCL's does), recording the order of the calls."""

    supports_coalescing = True

    def __init__(self, fake: Any) -> None:
        self.fake = fake
        self.calls: list[str] = []

    def _start_coalescing(self, device: torch.device) -> None:
        self.calls.append("start")

    def _end_coalescing(self, device: torch.device) -> Any:
        self.calls.append("end")
        return self.fake.barrier()

    def send(self, tensors: list[torch.Tensor], dst: int, tag: int) -> Any:
        self.calls.append(f"send to {dst}")
        return self.fake.send(tensors, dst, tag)

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int) -> Any:
        self.calls.append(f"recv from {src}")
        return self.fake.recv(tensors, src, tag)


def test_batched_point_to_point_stays_one_batch_through_the_wrapper(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from torch._C._distributed_c10d import FakeProcessGroup
    from torch.testing._internal.distributed.fake_pg import FakeStore

    def fake(options: Any, backend_options: Any) -> Any:
        return FakeProcessGroup._create_internal(options.group_rank, options.group_size)

    monkeypatch.setitem(meter_module.COUNTED, "nccl",
                        type(meter_module.COUNTED["nccl"])("dtbench_nccl", ("cpu",), fake))
    meter = CommMeter()
    name = register_counted_backend("nccl", meter)
    dist.init_process_group(name, store=FakeStore(), rank=1, world_size=4)
    try:
        world = c10d._get_default_group()
        inner = Coalescing(world.inner)
        world._inner = inner
        ops = [dist.P2POp(dist.isend, torch.ones(250), 0),
               dist.P2POp(dist.irecv, torch.empty(250), 2)]
        works = dist.batch_isend_irecv(ops)
        assert inner.calls == ["start", "send to 0", "recv from 2", "end"]
        assert len(works) == 1
        assert meter.calls == {"send": 1} and meter.total["payload"] == 1000
    finally:
        dist.destroy_process_group()


def test_gossip_runs_over_nccl() -> None:
    """Its only reason to refuse NCCL was unbatched point-to-point."""
    from harness.spec.specs import RunSpec
    from harness.strategies import STRATEGIES

    gossip = STRATEGIES.get("gossip")
    gossip.check(RunSpec(workload="hep_cnn", size="tiny", backend="cuda", comm="nccl",
                         nproc_per_node=2, batch_per_rank=4, steps=3, strategy="gossip"))
    assert "nccl" in gossip.comms
