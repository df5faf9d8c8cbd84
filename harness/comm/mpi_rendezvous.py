"""How the ranks of an MPI job find the TCPStore torch wants beside the process group.

Rank 0 serves the store on all its interfaces and tells the others over MPI where it is
(MASTER_ADDR where set, else each of its IPv4 addresses, loopback last, for them to try), so
jobs started by mpirun or srun need no MASTER_ADDR/MASTER_PORT. The ranks decide together
whether every one reached it, so that none waits for a rank that gave up.
"""
from __future__ import annotations

import os
import socket
import struct
from datetime import timedelta
from typing import Any

import torch.distributed as dist

# Linux ioctl that reads an interface's IPv4 address, and how long to try each address.
_SIOCGIFADDR = 0x8915
_CONNECT_PROBE_S = 2.0


def rendezvous_store(comm: Any, timeout: timedelta) -> dist.Store:
    """A TCPStore served by rank 0 on all its interfaces; the others learn where over MPI."""
    rank, world_size = comm.Get_rank(), comm.Get_size()
    master_addr = os.environ.get("MASTER_ADDR")
    store: dist.Store | None = None
    offer: tuple[list[str], int] | str = ""
    if rank == 0:
        try:
            store = dist.TCPStore(master_addr or "127.0.0.1",
                                  int(os.environ.get("MASTER_PORT", 0)), world_size,
                                  is_master=True, timeout=timeout, wait_for_workers=False)
            offer = ([master_addr] if master_addr else local_addresses(), store.port)
        except (OSError, RuntimeError, ValueError) as exc:
            offer = f"rank 0 could not start the rendezvous store: {exc}"
    offer = comm.bcast(offer, root=0)
    if isinstance(offer, str):
        raise RuntimeError(offer)
    hosts, port = offer
    host = hosts[0] if store is not None else first_reachable(hosts, port)
    # Decide together, so that no rank goes on to wait for one that gave up.
    unreachable = comm.allgather(host is None)
    if any(unreachable):
        raise RuntimeError(f"rank(s) {[r for r, bad in enumerate(unreachable) if bad]} cannot "
                           f"reach rank 0's rendezvous store at {hosts} port {port}; set "
                           "MASTER_ADDR to an address of rank 0's host that they can reach")
    if store is None:
        store = dist.TCPStore(host, port, world_size, is_master=False, timeout=timeout)
    return store


def local_addresses() -> list[str]:
    """This host's IPv4 addresses, loopback last: where rank 0's store can be reached."""
    import fcntl  # POSIX only, and only needed here

    addresses: list[str] = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            try:
                request = struct.pack("256s", name.encode()[:15])
                reply = fcntl.ioctl(probe.fileno(), _SIOCGIFADDR, request)
            except OSError:  # an interface without an IPv4 address
                continue
            addresses.append(socket.inet_ntoa(reply[20:24]))
    return sorted(set(addresses) | {"127.0.0.1"}, key=lambda a: a.startswith("127."))


def first_reachable(hosts: list[str], port: int) -> str | None:
    """The first of rank 0's addresses this rank can open a connection to."""
    for host in hosts:
        try:
            socket.create_connection((host, port), timeout=_CONNECT_PROBE_S).close()
        except OSError:
            continue
        return host
    return None
