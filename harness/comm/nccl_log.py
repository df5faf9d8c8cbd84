"""What NCCL chose, read from NCCL's own debug output: the algorithm and protocol of each
collective, the transport of each connection (peer to peer over NVLink or PCIe, shared memory,
the network and which), the network plugin, and a multi-node job that fell back to sockets.

Each GPU rank asks NCCL, before its first communicator exists, for its INFO lines of the
INIT, NET and TUNING subsystems in a file of its own (NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS,
NCCL_DEBUG_FILE; NCCL reads them at its first communicator), unless the user set NCCL_DEBUG
already. A line is `host:pid:tid [cudaDev] NCCL INFO message` (src/debug.cc); the messages
read here are, as NCCL prints them (src/enqueue.cc, src/transport/{p2p,shm,net}.cc,
src/init.cc):

- `AllReduce: 4194304 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..31}` (2.26 and
  later), `AllReduce: 4194304 Bytes -> Algo 1 proto 2 time 36.9` (2.23 to 2.25, indices),
  `4194304 Bytes -> Algo 1 proto 2 time 36.9` (2.20 to 2.22, no collective named), and
  `AllReduce [Symmetric]: 4194304 Bytes -> Kernel K nchannels N nthreads T` (2.27 and later);
  rank 0 of each communicator prints them, once per call;
- `Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read` (and P2P/IPC, P2P/direct pointer,
  SHM/direct, `[send] via NET/IB/0/GDRDMA`, `via NET/Socket/0`);
- `Using network IB` (or Socket), `comm 0x... rank 0 nRanks 16 nNodes 2 localRanks 8 ...`,
  and `NCCL version 2.28.9+cuda13.0`."""
from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

DEBUG_SUBSYSTEMS = "INIT,NET,TUNING"
# NCCL_ALGO_* and NCCL_PROTO_* (src/include/nccl_common.h), for the releases that print indices.
ALGORITHMS = ("TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT")
PROTOCOLS = ("LL", "LL128", "SIMPLE")

_INFO = re.compile(r"NCCL INFO (.*)$")
_TUNED = re.compile(r"^(?:(\w+)(?: \[Symmetric\])?: )?(\d+) Bytes -> "
                    r"(?:Algo (\w+) proto (\w+)|Kernel (\S+))")
_CHANNEL = re.compile(r"^Channel \d+(?:/\d+)? : \d+\[\d+\] -> \d+\[\d+\] "
                      r"(?:\[\w+\] )?via (\S+(?: pointer)?)")
_NETWORK = re.compile(r"^Using network (\S+)")
_NODES = re.compile(r"\bnRanks (\d+) nNodes (\d+)")
_VERSION = re.compile(r"NCCL version (\S+)")


def debug_environment(log_path: Path, environ: Mapping[str, str] | None = None
                      ) -> dict[str, str]:
    """The variables that have NCCL write this rank's INFO lines to `log_path`; none where
    the user set NCCL_DEBUG (their setting and its destination stay theirs)."""
    env = os.environ if environ is None else environ
    if env.get("NCCL_DEBUG"):
        return {}
    return {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": DEBUG_SUBSYSTEMS,
            "NCCL_DEBUG_FILE": str(log_path)}


def _name(value: str, names: tuple[str, ...]) -> str:
    return names[int(value)] if value.isdigit() and int(value) < len(names) else value


def transport_kind(via: str) -> str:
    """A connection's transport without its channel's particulars: P2P/CUMEM, P2P/IPC,
    P2P/direct pointer, P2P/indirect, SHM, NET/IB (/GDRDMA where GPUDirect RDMA is used),
    NET/Socket."""
    parts = via.split("/")
    if parts[0] == "NET" and len(parts) > 1:
        return f"NET/{parts[1]}" + ("/GDRDMA" if "GDRDMA" in via else "")
    if parts[0] == "P2P" and len(parts) > 1:
        return f"P2P/{parts[1]}"
    return parts[0]


def parse_nccl_log(text: str) -> dict[str, Any]:
    """One rank's NCCL INFO lines summarised: the version, the network plugin, the most nodes
    a communicator spanned, connections by transport, and per collective the algorithm and
    protocol NCCL chose, counted by call."""
    found: dict[str, Any] = {"version": None, "network": None, "nodes": None,
                             "transports": {}, "collectives": {}}
    for line in text.splitlines():
        version = _VERSION.search(line)
        if version and found["version"] is None:
            found["version"] = version.group(1)
        info = _INFO.search(line)
        if info is None:
            continue
        message = info.group(1).strip()
        if tuned := _TUNED.match(message):
            collective, _, algo, proto, kernel = tuned.groups()
            choice = (f"symmetric {kernel}" if kernel else
                      f"{_name(algo, ALGORITHMS)}/{_name(proto, PROTOCOLS)}")
            chosen = found["collectives"].setdefault(collective or "unnamed", {})
            chosen[choice] = chosen.get(choice, 0) + 1
        elif channel := _CHANNEL.match(message):
            kind = transport_kind(channel.group(1))
            found["transports"][kind] = found["transports"].get(kind, 0) + 1
        elif network := _NETWORK.match(message):
            found["network"] = network.group(1)
        elif nodes := _NODES.search(message):
            found["nodes"] = max(found["nodes"] or 0, int(nodes.group(2)))
    return found


def read_rank_log(path: Path) -> dict[str, Any] | None:
    """A rank's NCCL log summarised, or None where NCCL wrote none."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    return parse_nccl_log(text)


def nccl_summary(per_rank: Iterable[Mapping[str, Any] | None]) -> dict[str, Any] | None:
    """The record's `nccl`: the ranks' logs together (connections and choices summed, the
    networks and versions seen), and `socket_fallback` where a communicator spanned nodes
    over NCCL's socket transport rather than InfiniBand or RoCE."""
    logs = [log for log in per_rank if log]
    if not logs:
        return None
    transports: dict[str, int] = {}
    collectives: dict[str, dict[str, int]] = {}
    for log in logs:
        for kind, count in log.get("transports", {}).items():
            transports[kind] = transports.get(kind, 0) + count
        for collective, choices in log.get("collectives", {}).items():
            merged = collectives.setdefault(collective, {})
            for choice, count in choices.items():
                merged[choice] = merged.get(choice, 0) + count
    networks = sorted({log["network"] for log in logs if log.get("network")})
    nodes = max((log.get("nodes") or 1 for log in logs), default=1)
    socket = nodes > 1 and ("Socket" in networks or any(
        kind.startswith("NET/Socket") for kind in transports))
    return {"versions": sorted({log["version"] for log in logs if log.get("version")}),
            "networks": networks, "nodes": nodes, "ranks_read": len(logs),
            "transports": transports, "collectives": collectives, "socket_fallback": socket}
