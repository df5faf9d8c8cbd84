"""Machine and software fingerprints: the keys a record needs, and robustness to odd hosts."""
from __future__ import annotations

from types import SimpleNamespace

import psutil
import pytest

from harness.machine import fingerprint as sysinfo


def nic(up: bool, speed: int) -> SimpleNamespace:
    return SimpleNamespace(isup=up, speed=speed)


def no_infiniband(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sysinfo, "Path", lambda path: SimpleNamespace(is_dir=lambda: False))


def test_machine_info_has_the_record_keys() -> None:
    info = sysinfo.machine_info()
    for key in ("machine_id", "hostname", "os", "kernel", "cpu_model", "cpu_cores", "ram_bytes",
                "gpus", "nodes", "interconnect"):
        assert key in info
    assert info["cpu_cores"] >= 1 and info["ram_bytes"] > 0
    assert info["machine_id"] == sysinfo.machine_id() and len(info["machine_id"]) == 16


def test_software_info_has_the_record_keys() -> None:
    info = sysinfo.software_info(include_mpi=False)
    for key in ("python", "torch", "onednn", "cuda", "cudnn", "nccl", "mpi"):
        assert key in info
    assert info["mpi"] is None


def test_harness_info_names_version_commit_dirty_flag_and_tree() -> None:
    info = sysinfo.harness_info()
    assert set(info) == {"version", "git_commit", "dirty", "git_tree"}


def test_interconnect_picks_the_fastest_up_ethernet_link(monkeypatch: pytest.MonkeyPatch) -> None:
    no_infiniband(monkeypatch)
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    monkeypatch.setattr(sysinfo, "shaped_rate_mbps", lambda name: None)
    monkeypatch.setattr(psutil, "net_if_stats", lambda: {
        "lo": nic(True, 0), "eth0": nic(True, 1000), "eth1": nic(True, 25000),
        "eth2": nic(False, 100000)})
    assert sysinfo.interconnect() == {"type": "ethernet", "interface": "eth1",
                                      "speed_mbps": 25000}


def test_interconnect_without_links_is_none(monkeypatch: pytest.MonkeyPatch) -> None:
    no_infiniband(monkeypatch)
    monkeypatch.setattr(psutil, "net_if_stats", lambda: {"lo": nic(True, 0)})
    assert sysinfo.interconnect() is None


def test_interconnect_tolerates_links_of_unknown_speed(monkeypatch: pytest.MonkeyPatch) -> None:
    no_infiniband(monkeypatch)
    monkeypatch.setattr(psutil, "net_if_stats", lambda: {
        "lo": nic(True, 0), "eth0": nic(True, 0), "veth1": nic(True, 10000)})
    found = sysinfo.interconnect()
    assert found is not None and found["interface"] == "veth1"


def test_interconnect_prefers_the_gloo_interface_and_reports_its_tbf_cap(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    no_infiniband(monkeypatch)
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "dtb0")
    monkeypatch.setattr(psutil, "net_if_stats", lambda: {
        "lo": nic(True, 0), "eth0": nic(True, 25000), "dtb0": nic(True, 10000)})
    monkeypatch.setattr(sysinfo.shutil, "which", lambda name: "/sbin/tc")
    shown = []

    def fake_tc(argv: list[str], **kwargs: object) -> SimpleNamespace:
        shown.append(argv)
        # `tc -j qdisc show` gives a tbf's rate in bytes per second: 6250000 B/s = 50 Mbit/s.
        return SimpleNamespace(returncode=0, stdout='[{"kind":"tbf","handle":"8049:",'
                               '"options":{"rate":6250000,"burst":262143,"lat":50000}}]')

    monkeypatch.setattr(subprocess, "run", fake_tc)
    assert sysinfo.interconnect() == {"type": "ethernet", "interface": "dtb0",
                                      "speed_mbps": 10000, "tbf_mbps": 50.0}
    assert shown == [["tc", "-j", "qdisc", "show", "dev", "dtb0"]]


def test_an_uncapped_link_has_no_tbf_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    monkeypatch.setattr(sysinfo.shutil, "which", lambda name: "/sbin/tc")
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: SimpleNamespace(
        returncode=0, stdout='[{"kind":"noqueue","handle":"0:","options":{}}]'))
    assert sysinfo.shaped_rate_mbps("eth0") is None
    monkeypatch.setattr(sysinfo.shutil, "which", lambda name: None)
    assert sysinfo.shaped_rate_mbps("eth0") is None


def test_mpi_version_keeps_printable_text_only(monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    monkeypatch.setattr("backends.base.module_available", lambda name: True)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: SimpleNamespace(
        stdout="Open MPI v5.0.11, ident: 5.0.11\x00\n4.1.2\n"))
    # The uncached function under the fake: the process's cached answer (asked once, by
    # tests/conftest.py) stays, so later tests start no MPI child.
    assert sysinfo.mpi_version.__wrapped__() == {
        "implementation": "Open MPI v5.0.11, ident: 5.0.11", "mpi4py": "4.1.2"}
