"""Security: a local multi-rank run listens on the loopback address only."""
from __future__ import annotations

import ipaddress
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]


def _listening(processes: list[psutil.Process]) -> list[tuple[int, str, int]]:
    found = []
    for proc in processes:
        try:
            for conn in proc.net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN:
                    found.append((proc.pid, conn.laddr.ip, conn.laddr.port))
        except psutil.Error:
            continue
    return found


def test_gloo_ranks_listen_on_loopback_only(tmp_path: Path) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", "run", "-w", "lstm", "--size", "tiny", "-n", "2",
         "--comm", "gloo", "--threads", "1", "--steps", "100000", "-q", "--out",
         str(tmp_path / "store")], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True)
    try:
        parent = psutil.Process(proc.pid)
        sockets: list[tuple[int, str, int]] = []
        deadline = time.monotonic() + 180
        # Both ranks up and the group formed: rank 0's store plus each rank's gloo listener.
        while time.monotonic() < deadline and len(sockets) < 3 and proc.poll() is None:
            time.sleep(0.5)
            sockets = _listening([parent, *parent.children(recursive=True)])
        assert len(sockets) >= 3, (sockets, proc.poll())
        addresses = {ip for _, ip, _ in sockets}
        assert all(ipaddress.ip_address(ip.removeprefix("::ffff:")).is_loopback
                   for ip in addresses), sockets
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
