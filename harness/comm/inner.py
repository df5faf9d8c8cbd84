"""The real process groups the counting wrapper (harness/comm/meter.py) wraps: gloo's, dtbench's
MPI group and torch's NCCL group, each made from the options torch hands a custom backend.

NCCL subgroups are split from the default group's communicator exactly as torch splits them
for its own "nccl" backend (`_new_process_group_helper` in torch/distributed/distributed_c10d.py):
once the default group is bound to a device, torch has every rank outside a new group call
`perform_nocolor_split` on the default group's NCCL backend, and builds the members' group
with `split_from` and a colour. A custom backend's creator is given neither, so it sets them
itself, from the same source and with the same colour: without them the members would run a
fresh NCCL initialisation while the non-members wait in an `ncclCommSplit` the members never
join."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


def _gloo_group(options: Any, backend_options: Any) -> Any:
    from torch.distributed import ProcessGroupGloo

    return ProcessGroupGloo(options.store, options.group_rank, options.group_size,
                            options.timeout)


def _mpi_group(options: Any, backend_options: Any) -> Any:
    from harness.comm.mpi_group import _create_mpi_pg

    return _create_mpi_pg(options, backend_options)


def split_source(ranks: list[int]) -> Any:
    """The NCCL backend a new group of `ranks` splits from, as torch picks it for its own
    groups: the default group's, once that group is bound to a device; None for the default
    group itself and before binding (then every group initialises on its own)."""
    from torch.distributed import distributed_c10d as c10d

    if not ranks or not c10d.is_initialized():
        return None
    default = c10d._get_default_group()
    if not default.bound_device_id:
        return None
    return c10d._get_split_source(default)


def nccl_options(options: Any, backend_options: Any, options_class: Any) -> Any:
    """ProcessGroupNCCL's options for a group torch asks the counted backend for: the
    caller's (or fresh ones) with the job's timeout, the group's ranks and name, and the
    split source and colour torch itself would give a member of a new group."""
    from torch.distributed import distributed_c10d as c10d

    found = backend_options if isinstance(backend_options, options_class) else options_class()
    found._timeout = options.timeout
    ranks = list(getattr(options, "global_ranks_in_group", None) or [])
    parent = split_source(ranks)
    if parent is not None:
        found.split_from = parent
        found.split_color = c10d._process_group_color(ranks)
    found.global_ranks_in_group = ranks
    found.group_name = options.group_id
    return found


def _nccl_group(options: Any, backend_options: Any) -> Any:
    """torch's own NCCL process group with the job's timeout (its watchdog's), any options the
    caller gave and, for a subgroup, the split torch's own groups take; the wrapper only
    counts, NCCL runs every call on its own streams."""
    from torch.distributed import ProcessGroupNCCL

    return ProcessGroupNCCL(options.store, options.group_rank, options.group_size,
                            nccl_options(options, backend_options, ProcessGroupNCCL.Options))


@dataclass(frozen=True)
class Counted:
    """A communication backend dtbench counts: the name its counting wrapper registers under,
    the devices its tensors are on (NCCL's on the GPU), and how it makes the group it wraps
    from torch's backend options."""

    name: str
    devices: tuple[str, ...]
    inner: Callable[[Any, Any], Any]


COUNTED = {"gloo": Counted("dtbench_gloo", ("cpu",), _gloo_group),
           "mpi": Counted("dtbench_mpi", ("cpu",), _mpi_group),
           "nccl": Counted("dtbench_nccl", ("cuda",), _nccl_group)}
