"""Two network namespaces joined by a veth pair: two "hosts" on one machine, for multi-node tests.

    with netns_pair(rate="100mbit") as pair:
        pair.run(pair.a, ["python", "-c", "..."], timeout=60)

Each namespace gets its end of the pair renamed to the same interface name (`dtb0`), an
address in 198.51.100.0/24 (TEST-NET-2, documentation range: never routed anywhere, and not
the host's own network), the link and loopback up. With `rate`, both ends get a token-bucket
filter (`tc qdisc add dev dtb0 root tbf rate RATE burst 256kb latency 50ms`), so each direction
of the link is capped. The namespaces (and with them the veth pair) are always deleted on
exit, after every process still inside them has been killed.

`write_fake_rsh` writes a stand-in for ssh that Open MPI's launcher can use (Open MPI 5 reads
it from PRTE_MCA_plm_ssh_agent only; Open MPI 4 from OMPI_MCA_plm_rsh_agent): called as
`AGENT [ssh options] HOST command...`, it runs the command in the namespace whose address is
HOST, under a hostname of its own (`unshare --uts`). The hostname matters: Open MPI tells nodes
apart by name, and with one name for both namespaces it treats the ranks as neighbours on one
node (shared memory; seen to hang or segfault). Needs root and iproute2 (`ip netns`, `tc`) and
util-linux's `unshare`.
"""
from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

IFNAME = "dtb0"
ADDR_A = "198.51.100.1"
ADDR_B = "198.51.100.2"
PREFIX_LEN = 24
TBF_BURST = "256kb"
TBF_LATENCY = "50ms"
IP_TIMEOUT_S = 20.0


class NetnsError(RuntimeError):
    """Setting up the namespaces failed (the message names the command and its stderr)."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run `ip ARGS` (or `tc` via `ip netns exec`), raising NetnsError on failure when check."""
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=IP_TIMEOUT_S,
                            check=False)
    if check and result.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {result.stderr.strip() or result.returncode}")
    return result


def netns_unavailable_reason() -> str | None:
    """Why two namespaces cannot be made here (not root, no `ip`, netns refused), or None.

    Probes for real: creates and deletes a throw-away namespace.
    """
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "needs root to create network namespaces (ip netns add)"
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not on PATH"
    name = f"dtb-probe-{uuid.uuid4().hex[:8]}"
    try:
        made = _ip("netns", "add", name, check=False)
        if made.returncode != 0:
            return f"ip netns add failed: {made.stderr.strip() or made.returncode}"
        inside = subprocess.run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"],
                                capture_output=True, text=True, timeout=IP_TIMEOUT_S,
                                check=False)
        if inside.returncode != 0:
            return f"ip netns exec failed: {inside.stderr.strip() or inside.returncode}"
    except (OSError, subprocess.SubprocessError) as exc:
        return f"ip netns probe failed: {exc}"
    finally:
        with suppress(OSError, subprocess.SubprocessError):
            _ip("netns", "delete", name, check=False)
    return None


def tc_unavailable_reason() -> str | None:
    """Why `tc qdisc ... tbf` cannot be used (probed on a throw-away pair), or None."""
    if shutil.which("tc") is None:
        return "iproute2's `tc` is not on PATH"
    try:
        with netns_pair(rate="1gbit"):
            pass
    except NetnsError as exc:
        return f"tc tbf unavailable: {exc}"
    return None


def netns_pids(ns: str) -> list[int]:
    """Pids of the processes whose network namespace is `ns`."""
    result = _ip("netns", "pids", ns, check=False)
    return [int(p) for p in result.stdout.split() if p.strip().isdigit()]


def kill_netns_processes(ns: str, wait_s: float = 5.0) -> list[int]:
    """SIGTERM, then SIGKILL, every process in `ns`; returns the pids that were found."""
    found = netns_pids(ns)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = netns_pids(ns)
        if not pids:
            break
        for pid in pids:
            with suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and netns_pids(ns):
            time.sleep(0.1)
    return found


@dataclass
class NetnsPair:
    """Namespaces `a` (address ADDR_A) and `b` (ADDR_B), each with interface `ifname`."""

    a: str
    b: str
    ifname: str = IFNAME
    addr_a: str = ADDR_A
    addr_b: str = ADDR_B
    rate: str | None = None
    host_links: list[str] = field(default_factory=list)

    @property
    def namespaces(self) -> tuple[str, str]:
        return self.a, self.b

    def address(self, ns: str) -> str:
        return {self.a: self.addr_a, self.b: self.addr_b}[ns]

    def namespace_of(self, address: str) -> str:
        return {self.addr_a: self.a, self.addr_b: self.b}[address]

    def exec_argv(self, ns: str, argv: Sequence[str]) -> list[str]:
        """`ip netns exec NS argv...`."""
        if ns not in self.namespaces:
            raise ValueError(f"{ns} is not one of this pair's namespaces {self.namespaces}")
        return ["ip", "netns", "exec", ns, *argv]

    def popen(self, ns: str, argv: Sequence[str], env: Mapping[str, str] | None = None,
              **kwargs: object) -> subprocess.Popen[str]:
        """Start argv inside `ns` in its own session (so its whole tree can be killed)."""
        return subprocess.Popen(self.exec_argv(ns, argv), env=dict(env) if env else None,
                                text=True, start_new_session=True,
                                stdin=subprocess.DEVNULL, **kwargs)  # type: ignore[call-overload]

    def run(self, ns: str, argv: Sequence[str], env: Mapping[str, str] | None = None,
            timeout: float = 180.0, cwd: str | Path | None = None,
            ) -> subprocess.CompletedProcess[str]:
        """Run argv inside `ns`, capture its output; on timeout kill its whole session."""
        proc = self.popen(ns, argv, env, cwd=cwd, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_tree(proc)
            out, err = proc.communicate()
            raise subprocess.TimeoutExpired(proc.args, timeout, out, err) from None
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def set_rate(self, rate: str | None) -> None:
        """Cap both ends at `rate` with tbf (replacing any cap), or remove the cap (None)."""
        for ns in self.namespaces:
            if rate is None:
                _ip("netns", "exec", ns, "tc", "qdisc", "del", "dev", self.ifname, "root",
                    check=False)
            else:
                _ip("netns", "exec", ns, "tc", "qdisc", "replace", "dev", self.ifname, "root",
                    "tbf", "rate", rate, "burst", TBF_BURST, "latency", TBF_LATENCY)
        self.rate = rate

    def qdisc(self, ns: str) -> str:
        return _ip("netns", "exec", ns, "tc", "qdisc", "show", "dev", self.ifname).stdout.strip()


def kill_tree(proc: subprocess.Popen[str], wait_s: float = 5.0) -> None:
    """SIGTERM then SIGKILL the process group of a process started with start_new_session.

    Once the leader has exited and been reaped its id may be reused, so its group is left
    alone: stragglers inside a namespace are found and killed by namespace on teardown.
    """
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if proc.poll() is not None:
            return
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        with suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=wait_s)


def _text(output: str | bytes | None) -> str:
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output or ""


def two_nodes(pair: NetnsPair, argv: Sequence[str], env: Mapping[str, str],
              out_a: Path, out_b: Path, cwd: Path, timeout: float,
              extra_a: Sequence[str] = ()) -> tuple[subprocess.CompletedProcess[str],
                                                     subprocess.CompletedProcess[str]]:
    """`argv --node-rank 1 --out out_b` in namespace b (in the background, its output in a log
    under cwd), then `argv --node-rank 0 --out out_a extra_a` in namespace a; both waited for,
    node 1 killed if it outlives node 0 by `timeout`. subprocess.TimeoutExpired (its output:
    node 1's log; its stderr: node 0's output) when either does not finish in time."""
    log_b = cwd / f"node1-{time.monotonic_ns()}.log"
    started = time.monotonic()
    with open(log_b, "w") as sink:
        node1 = pair.popen(pair.b, [*argv, "--node-rank", "1", "--out", str(out_b)], env,
                           cwd=cwd, stdout=sink, stderr=subprocess.STDOUT)
    try:
        try:
            node0 = pair.run(pair.a, [*argv, "--node-rank", "0", "--out", str(out_a), *extra_a],
                             env, timeout=timeout, cwd=cwd)
        except subprocess.TimeoutExpired as late:  # node 0 late: say what both printed
            raise subprocess.TimeoutExpired(late.cmd, timeout, log_b.read_text()[-3000:],
                                            _text(late.output) + _text(late.stderr)) from None
        remaining = max(10.0, timeout - (time.monotonic() - started))
        try:
            node1.wait(timeout=remaining)
        except subprocess.TimeoutExpired:
            raise subprocess.TimeoutExpired(node1.args, timeout, log_b.read_text()[-3000:],
                                            node0.stdout + node0.stderr) from None
    finally:
        kill_tree(node1)
    return node0, subprocess.CompletedProcess(node1.args, node1.returncode,
                                              log_b.read_text(), "")


@contextmanager
def netns_pair(rate: str | None = None, ifname: str = IFNAME) -> Iterator[NetnsPair]:
    """Create the two namespaces and the veth pair between them; always delete them after."""
    tag = uuid.uuid4().hex[:8]
    pair = NetnsPair(a=f"dtb-{tag}-a", b=f"dtb-{tag}-b", ifname=ifname)
    # Temporary names in the host namespace (at most 15 characters), renamed once moved.
    host_a, host_b = f"dtb{tag}a", f"dtb{tag}b"
    made: list[str] = []
    try:
        for ns in pair.namespaces:
            _ip("netns", "add", ns)
            made.append(ns)
        pair.host_links = [host_a, host_b]
        _ip("link", "add", host_a, "type", "veth", "peer", "name", host_b)
        for ns, link, address in ((pair.a, host_a, pair.addr_a), (pair.b, host_b, pair.addr_b)):
            _ip("link", "set", link, "netns", ns)
            _ip("-n", ns, "link", "set", link, "name", ifname)
            _ip("-n", ns, "addr", "add", f"{address}/{PREFIX_LEN}", "dev", ifname)
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "link", "set", ifname, "up")
        pair.host_links = []
        if rate is not None:
            pair.set_rate(rate)
        yield pair
    finally:
        for ns in made:
            with suppress(OSError, subprocess.SubprocessError):
                kill_netns_processes(ns)
            with suppress(OSError, subprocess.SubprocessError):
                _ip("netns", "delete", ns, check=False)
        for link in pair.host_links:  # a veth still in the host namespace after a failure
            with suppress(OSError, subprocess.SubprocessError):
                _ip("link", "delete", link, check=False)


FAKE_RSH = """#!/bin/sh
# Stand-in for ssh (Open MPI / PRRTE plm ssh agent): `AGENT [options] HOST command...` runs the
# command with /bin/sh inside HOST's network namespace on this same machine.
while [ $# -gt 0 ]; do
  case "$1" in
    -[pl]|-o) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
host="$1"
shift
case "$host" in
{cases}
  *) echo "fake rsh: unknown host $host" >&2; exit 255 ;;
esac
# A real remote shell starts from the remote host's environment, not the caller's: what a rank
# there sees of NCCL_* can only come from mpirun's forwarding (-x).
for name in $(env | sed -n 's/^\\(NCCL_[A-Za-z0-9_]*\\)=.*/\\1/p'); do unset "$name"; done
# Its own UTS namespace too, so that the "remote host" has its own hostname (MPI tells nodes
# apart by hostname; with one name for both it treats them as one node, shared memory and all).
exec ip netns exec "$ns" unshare --uts {unshare_extra}/bin/sh -c \\
  'hostname "$0" && {setup}exec /bin/sh -c "$1"' "$ns" "$*"
"""


def write_fake_rsh(pair: NetnsPair, path: Path, private_dirs: Sequence[Path] = (),
                   private_pids: bool = False) -> Path:
    """Write the fake remote shell for `pair` to `path` (executable) and return it.

    The "remote host" gets the namespace's name as its hostname. Each of `private_dirs`
    (existing directories) is, for the commands it starts, an empty tmpfs of their own in a
    private mount namespace: node-local scratch space, as on a real second host. With
    `private_pids` they also get their own pid namespace: their pids mean nothing here.
    """
    cases = "\n".join(f"  {addr}) ns={ns} ;;" for addr, ns in
                      ((pair.addr_a, pair.a), (pair.addr_b, pair.b)))
    mounts = "".join(f"mount -t tmpfs dtb-scratch {shlex.quote(str(d))} && "
                     for d in private_dirs)
    path.write_text(FAKE_RSH.format(
        cases=cases,
        unshare_extra=("--mount --propagation private " if private_dirs or private_pids else "")
        + ("--pid --fork --mount-proc " if private_pids else ""),
        setup=mounts.replace("'", "'\"'\"'")))
    path.chmod(0o755)
    return path
