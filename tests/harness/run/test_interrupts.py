"""SIGINT/SIGTERM: ranks stopped, completed records kept, nothing partial, --resume completes."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from harness.core.files import TMP_PREFIX
from harness.core.interrupts import Interrupted, stop_signals_deferred, stop_signals_raise
from harness.store.directory import Store

REPO_ROOT = Path(__file__).resolve().parents[3]

SUITE = """
name = "four"
[defaults]
size = "tiny"
steps = 60
warmup = 1
threads = 1
[[runs]]
workload = "hep_cnn"
batch_size = [8, 16, 24, 32]
"""


def test_a_stop_signal_raises_interrupted_with_the_shell_exit_code() -> None:
    with pytest.raises(Interrupted) as caught, stop_signals_raise():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    assert caught.value.signal_name == "SIGTERM" and caught.value.exit_code == 143
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_second_signal_does_not_interrupt_the_clean_up(capsys: pytest.CaptureFixture[str],
                                                         ) -> None:
    cleaned = False
    with pytest.raises(Interrupted), stop_signals_raise():
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        finally:
            os.kill(os.getpid(), signal.SIGINT)  # arrives while cleaning up: noted, not raised
            time.sleep(0.05)
            cleaned = True
    assert cleaned
    assert "still stopping ranks" in capsys.readouterr().err


def test_deferred_signals_arrive_after_the_block() -> None:
    finished = False
    with pytest.raises(Interrupted), stop_signals_raise():
        with stop_signals_deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.1)
            finished = True
        time.sleep(5)
    assert finished


def _environment(cache: Path) -> dict[str, str]:
    env = dict(os.environ, DTBENCH_CACHE_DIR=str(cache))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


def _start(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "harness", *args], cwd=REPO_ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(condition: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError("condition not reached in time")


def _clean(store: Path) -> None:
    leftovers = [p.name for p in store.rglob("*") if p.name.startswith(TMP_PREFIX)]
    assert leftovers == []


@pytest.mark.slow
def test_sigint_mid_suite_then_resume_gives_exactly_four_records(
        tmp_path: Path, seeded_cache_dir: Path) -> None:
    suite = tmp_path / "four.toml"
    suite.write_text(SUITE)
    store = tmp_path / "store"
    env = _environment(seeded_cache_dir)
    proc = _start(["run", str(suite), "--out", str(store)], env)
    _wait_for(lambda: len(list(store.rglob("*.json"))) >= 1 or proc.poll() is not None, 240)
    assert proc.poll() is None, "the suite ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("dtbench: interrupted by SIGINT during run") and "--resume" in last
    assert "Traceback" not in err
    kept = sorted(store.rglob("*.json"))
    assert 1 <= len(kept) < 4
    assert Store(store).rebuild_index() == len(kept)
    _clean(store)

    resumed = _start(["run", str(suite), "--out", str(store), "--resume", "-q"], env)
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    assert f"resume: {len(kept)} run(s) already complete" in err
    records = [json.loads(p.read_text()) for p in sorted(store.rglob("*.json"))]
    assert len(records) == 4 and all(r["status"] == "success" for r in records)
    assert sorted(r["spec"]["batch_per_rank"] for r in records) == [8, 16, 24, 32]
    assert len({r["spec_key"] for r in records}) == 4
    assert not (store / "index.sqlite").exists()  # the index is in the cache
    _clean(store)


@pytest.mark.slow
def test_sigterm_during_a_two_rank_run_stops_every_rank(tmp_path: Path,
                                                        seeded_cache_dir: Path) -> None:
    store = tmp_path / "store"
    proc = _start(["run", "-w", "lstm", "--size", "tiny", "-n", "2", "--comm", "gloo",
                   "--threads", "1", "--steps", "2000", "-q", "--out", str(store)],
                  _environment(seeded_cache_dir))
    parent = psutil.Process(proc.pid)

    def ranks() -> list[psutil.Process]:
        return [p for p in parent.children(recursive=True)
                if "harness.rank.main" in " ".join(p.cmdline())]

    _wait_for(lambda: len(ranks()) == 2, 120)
    seen = parent.children(recursive=True)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "interrupted by SIGTERM during run 1 of 1: 0 completed record(s)" in err
    alive = [p.pid for p in seen if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert alive == []
    assert list(store.rglob("*.json")) == []
    _clean(store)
