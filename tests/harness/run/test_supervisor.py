"""The supervisor's judgement of a launcher, with a launcher played by a small script."""
from __future__ import annotations

import sys
import textwrap
from collections.abc import Sequence
from typing import Any

import pytest

from backends.launchers import LaunchCommand
from harness.run import supervisor as supervisor_module
from harness.run.supervisor import Supervisor
from harness.spec.specs import LaunchOptions, RunSpec

SPEC = RunSpec(workload="hep_cnn", size="tiny", batch_per_rank=4, steps=3, comm="gloo",
               launcher="torchrun")

# Rank 0 reports success with its results, then the "launcher" stays, as torchrun's agent
# stays in its exit barrier waiting for an agent whose rank aborted after succeeding.
LINGERING = textwrap.dedent("""
    import json, sys, time
    from harness.rundir import RunDir
    run_dir = RunDir.join(sys.argv[sys.argv.index("--run-dir") + 1])
    run_dir.write_heartbeat(0, "measure", 3, 3)
    run_dir.result_path().write_text(json.dumps([{"rank": 0, "measured": True}]))
    run_dir.write_status(0, STATUS, ERROR)
    time.sleep(120)
""")


def _supervise(monkeypatch: pytest.MonkeyPatch, status: str,
               error: str | None = None) -> tuple[Supervisor, Any]:
    monkeypatch.setattr(supervisor_module, "LAUNCHER_EXIT_S", 1.0)
    monkeypatch.setattr(supervisor_module, "GRACE_S", 1.0)
    supervisor = Supervisor(SPEC, LaunchOptions(rank_timeout=60.0, comm_timeout=900.0),
                            "run-lingers")

    def commands(spec: RunSpec, launch: LaunchOptions, rank_args: list[str],
                 forward: Sequence[str]) -> list[LaunchCommand]:
        # Every rank learns both timeouts: the rank timeout and NCCL's watchdog's.
        assert rank_args[rank_args.index("--timeout") + 1] == "60.0"
        assert rank_args[rank_args.index("--comm-timeout") + 1] == "900.0"
        script = LINGERING.replace("STATUS", repr(status)).replace("ERROR", repr(error))
        return [LaunchCommand([sys.executable, "-c", script, *rank_args], {})]

    monkeypatch.setattr(supervisor.launcher, "commands", commands)
    try:
        return supervisor, supervisor.run()
    except Exception as exc:  # noqa: BLE001 - the failure is what some tests look at
        return supervisor, exc


def test_a_launcher_outliving_its_successful_ranks_is_stopped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    supervisor, results = _supervise(monkeypatch, "success")
    assert results == [{"rank": 0, "measured": True}]
    (launcher, _), = supervisor.procs
    # Stopped by the supervisor (a signal), not waited for until it exited by itself.
    assert launcher.returncode is not None and launcher.returncode < 0


def test_a_launcher_outliving_a_failed_rank_is_a_failure(
        monkeypatch: pytest.MonkeyPatch) -> None:
    supervisor, outcome = _supervise(monkeypatch, "failed", "loss was NaN")
    assert isinstance(outcome, supervisor_module.RunFailed)
    assert "rank 0: loss was NaN" in str(outcome)
    (launcher, _), = supervisor.procs
    assert launcher.returncode is not None and launcher.returncode < 0
