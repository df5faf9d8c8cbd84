"""NCCL's own account of what it chose, parsed from its INFO lines. The sample logs are written
here from NCCL's documented line format (src/debug.cc's `host:pid:tid [dev] NCCL INFO ...`)
and the messages as NCCL's sources print them (src/enqueue.cc, src/transport/*.cc,
src/init.cc, releases 2.21 to 2.30); they are not captured from a GPU."""
from __future__ import annotations

from pathlib import Path

from harness.comm.nccl_log import (
    debug_environment,
    nccl_summary,
    parse_nccl_log,
    read_rank_log,
    transport_kind,
)

# One node of eight H100s behind NVSwitch, NCCL 2.28 (algorithm and protocol by name).
ONE_NODE = """\
NCCL version 2.28.9+cuda13.0
a:41:41 [0] NCCL INFO Using network IB
a:41:41 [0] NCCL INFO comm 0x55d0c2a0 rank 0 nRanks 8 nNodes 1 localRanks 8 localRank 0 MNNVL 0
a:41:52 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
a:41:52 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read
a:41:52 [0] NCCL INFO Channel 00/0 : 7[7] -> 0[0] via P2P/CUMEM/read
a:41:41 [0] NCCL INFO AllReduce: 26214400 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..31}
a:41:41 [0] NCCL INFO AllReduce: 26214400 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..31}
a:41:41 [0] NCCL INFO AllReduce: 4096 Bytes -> Algo NVLS proto SIMPLE channel{Lo..Hi}={0..15}
a:41:41 [0] NCCL INFO AllGather: 1048576 Bytes -> Algo RING proto LL128 channel{Lo..Hi}={0..7}
a:41:41 [0] NCCL INFO AllReduce [Symmetric]: 8192 Bytes -> Kernel AGxLL_R nchannels 4 nthreads 512
"""

# Two nodes that found no InfiniBand: NCCL 2.24 prints indices (1 = RING, 2 = SIMPLE, 0 = TREE).
TWO_NODES_ON_SOCKETS = """\
b:77:77 [0] NCCL INFO NET/IB : No device found.
b:77:77 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.2<0>
b:77:77 [0] NCCL INFO Using network Socket
b:77:77 [0] NCCL INFO comm 0x1 rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0
b:77:90 [0] NCCL INFO Channel 00/0 : 15[7] -> 0[0] [receive] via NET/Socket/0
b:77:90 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/Socket/0
b:77:90 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via SHM/direct/direct
b:77:77 [0] NCCL INFO AllReduce: 4194304 Bytes -> Algo 1 proto 2 time 1520.250000
b:77:77 [0] NCCL INFO AllReduce: 1024 Bytes -> Algo 0 proto 0 time 40.100000
"""


def test_a_node_on_nvswitch_names_its_transport_and_choices() -> None:
    found = parse_nccl_log(ONE_NODE)
    assert found["version"] == "2.28.9+cuda13.0" and found["network"] == "IB"
    assert found["nodes"] == 1
    assert found["transports"] == {"P2P/CUMEM": 3}
    assert found["collectives"] == {
        "AllReduce": {"RING/SIMPLE": 2, "NVLS/SIMPLE": 1,
                      "symmetric AGxLL_R": 1},
        "AllGather": {"RING/LL128": 1}}


def test_older_releases_print_indices_and_some_no_collective() -> None:
    found = parse_nccl_log(TWO_NODES_ON_SOCKETS)
    assert found["collectives"] == {"AllReduce": {"RING/SIMPLE": 1, "TREE/LL": 1}}
    older = parse_nccl_log("h:1:1 [0] NCCL INFO 4194304 Bytes -> Algo 6 proto 1 time 9.0\n")
    assert older["collectives"] == {"unnamed": {"PAT/LL128": 1}}


def test_a_multi_node_job_on_sockets_is_flagged() -> None:
    summary = nccl_summary([parse_nccl_log(TWO_NODES_ON_SOCKETS), None])
    assert summary["socket_fallback"] and summary["nodes"] == 2
    assert summary["networks"] == ["Socket"] and summary["ranks_read"] == 1
    assert summary["transports"] == {"NET/Socket": 2, "SHM": 1}
    # one node over its own sockets is no fallback; two nodes over InfiniBand neither
    assert not nccl_summary([parse_nccl_log(ONE_NODE)])["socket_fallback"]
    on_ib = TWO_NODES_ON_SOCKETS.replace("Using network Socket", "Using network IB") \
        .replace("NET/Socket/0", "NET/IB/0/GDRDMA")
    summary = nccl_summary([parse_nccl_log(on_ib)] * 2)
    assert not summary["socket_fallback"] and summary["transports"]["NET/IB/GDRDMA"] == 4
    assert nccl_summary([None, None]) is None


def test_transports_lose_their_channel_particulars() -> None:
    assert transport_kind("NET/IB/3/GDRDMA") == "NET/IB/GDRDMA"
    assert transport_kind("NET/IB/0(8)/GDRDMA/Shared") == "NET/IB/GDRDMA"
    assert transport_kind("P2P/IPC/read") == "P2P/IPC"
    assert transport_kind("P2P/direct pointer") == "P2P/direct pointer"
    assert transport_kind("SHM/direct/direct") == "SHM"


def test_a_rank_asks_nccl_for_its_own_log_unless_the_user_did(tmp_path: Path) -> None:
    path = tmp_path / "nccl-rank3.log"
    asked = debug_environment(path, {})
    assert asked == {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET,TUNING",
                     "NCCL_DEBUG_FILE": str(path)}
    assert debug_environment(path, {"NCCL_DEBUG": "WARN"}) == {}
    assert read_rank_log(path) is None  # NCCL wrote nothing
    path.write_text(ONE_NODE)
    assert read_rank_log(path)["network"] == "IB"
