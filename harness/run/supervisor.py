"""Start a run's ranks through its launcher, watch them, and bring back their measurements.

A rank that exits with an error, dies from a signal or stops making progress for
`rank_timeout` seconds ends the run: the launcher's whole process tree is terminated (then
killed), every process carrying this run's DTBENCH_RUN_ID is swept up, and the failure names
the rank and the cause.
"""
from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from backends.base import Launcher, killed_by_cause, signal_name
from harness.core.errors import RunFailed, SkipRun
from harness.run.guard import check_rendezvous, rank_threads
from harness.run.losses import LossBook
from harness.run.ranklogs import last_error_line, traceback_tail
from harness.rundir import (
    RUN_ID_VAR,
    RankState,
    RunDir,
    Task,
    forwarded_variables,
    spec_environment,
)
from harness.spec.specs import LaunchOptions

POLL_S = 0.2
GRACE_S = 10.0
TERM_WAIT_S = 5.0
# How long a launcher may outlive ranks that all reported success. torchrun's agents wait up
# to 300 s in an exit barrier for the other nodes' agents, and an agent whose rank aborted
# while tearing gloo down after its success never arrives there.
LAUNCHER_EXIT_S = 30.0


def free_port(address: str = "127.0.0.1") -> int:
    """A TCP port free right now on `address` (the rendezvous binds it moments later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((address if address not in ("localhost", "") else "127.0.0.1", 0))
        return int(probe.getsockname()[1])


def sweep_run_processes(run_id: str, sig: int = signal.SIGKILL) -> list[int]:
    """Kill any process left with this run's id in its environment; returns their pids."""
    killed = []
    me = os.getpid()
    for proc in psutil.process_iter(["pid"]):
        if proc.pid == me:
            continue
        try:
            if proc.environ().get(RUN_ID_VAR) == run_id:
                proc.send_signal(sig)
                killed.append(proc.pid)
        except (psutil.Error, OSError):
            continue
    return killed


class Supervisor:
    """Runs one spec's ranks to completion or to a clear failure."""

    def __init__(self, spec: Task, launch: LaunchOptions, run_id: str,
                 progress: Callable[[str, int, int], None] | None = None,
                 log_path: Path | None = None) -> None:
        from backends import LAUNCHERS

        self.spec = spec
        self.launch = launch
        self.run_id = run_id
        self.progress = progress or (lambda phase, done, total: None)
        self.log_path = log_path
        self.launcher: Launcher = LAUNCHERS.get(spec.launcher)()
        self.run_dir = RunDir.create(run_id)
        self.procs: list[tuple[subprocess.Popen[bytes], int | None]] = []
        self.started = 0.0
        self.succeeded_at: float | None = None
        self.losses = LossBook(spec, self.run_dir)

    def run(self) -> list[dict[str, Any]] | None:
        """Every rank's report (on node 0); None on other nodes, which write no record."""
        try:
            rank_args = ["--run-dir", str(self.run_dir.path),
                         "--timeout", str(self.launch.rank_timeout),
                         "--comm-timeout", str(self.launch.comm_timeout)]
            if self.log_path is not None and getattr(self.spec, "mode", None) == "ttt":
                rank_args += ["--log", str(self.log_path)]
            env = self._environment()
            forward = forwarded_variables(env)
            commands = self.launcher.commands(self.spec, self.launch, rank_args, forward)
            self._start(commands, env)
            failure = self._watch()
            if failure is not None:
                raise RunFailed(failure, traceback_tail(
                    self.run_dir, self.launcher, [rank for _, rank in self.procs], failure))
            return self._results()
        finally:
            self._terminate()
            self.run_dir.remove()

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        # mpirun/srun ranks find rank 0 themselves (comm/mpi_group.py broadcasts its addresses); an
        # address is only imposed on them when the user gave one.
        check_rendezvous(self.spec, self.launch)
        address = self.launch.master_addr
        if address is None and self.spec.comm != "mpi":
            # gloo/nccl need a rendezvous host: this one (srun and mpirun start every node's
            # ranks from here; local ranks start here; torchrun across nodes was given one).
            address = socket.gethostname() if self.spec.nnodes > 1 else "127.0.0.1"
        port = self.launch.master_port or free_port(address or "127.0.0.1")
        self.launch = dataclasses.replace(self.launch, master_addr=address or "127.0.0.1",
                                          master_port=port)
        env.update({"MASTER_PORT": str(port), "PYTHONUNBUFFERED": "1",
                    **spec_environment(self.spec, self.run_id)})
        if address is not None:
            env["MASTER_ADDR"] = address
        else:
            env.pop("MASTER_ADDR", None)
        threads = rank_threads(self.spec)  # a GPU rank's share of the cores unless given
        if threads and (self.spec.threads or "OMP_NUM_THREADS" not in env):
            env["OMP_NUM_THREADS"] = str(threads)
        root = str(Path(__file__).resolve().parents[2])  # this checkout, for the ranks
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        return env

    def _start(self, commands: list[Any], base: dict[str, str]) -> None:
        self.started = time.monotonic()
        for command in commands:
            log = open(self.run_dir.launcher_log(len(self.procs)), "wb")  # noqa: SIM115
            proc = subprocess.Popen(command.argv, env={**base, **command.env},
                                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
            log.close()
            self.procs.append((proc, command.rank))

    def _local_ranks(self) -> range:
        first = self.launch.node_rank * self.spec.nproc_per_node
        if self.spec.launcher in ("mpirun", "slurm"):
            return range(0, self.spec.world_size)
        return range(first, first + self.spec.nproc_per_node)

    def _watch(self) -> str | None:
        """Poll until every launcher process has exited; return a failure reason or None.

        A dead, killed or hung rank is the cause; errors that its peers then report
        ("connection closed by peer") are consequences, so they rank lower. Failures of
        equal rank are ordered by time: a rank's own status carries the moment it failed.
        """
        failures: list[tuple[float, float, str]] = []  # (priority, time, reason)
        seen: set[str] = set()

        def note(priority: float, key: str, reason: str, at: float | None = None) -> None:
            if key not in seen:
                seen.add(key)
                failures.append((priority, time.time() if at is None else at, reason))

        direct = {rank for _, rank in self.procs if rank is not None}
        # Under torchrun, Open MPI and srun a vanished rank may have been stopped by the
        # launcher after a peer failed; their reports name the ranks a signal killed (-1).
        reads_reports = self.launcher.names_killed_ranks
        vanished_priority = 1.5 if reads_reports else 0
        while True:
            states = self.run_dir.rank_states()
            lead = states.get(min(states)) if states else None
            if lead is not None:
                self.progress(lead.phase, lead.done, lead.total)
            running = [p for p, _ in self.procs if p.poll() is None]
            for proc, rank in self.procs:
                code = proc.returncode
                if code not in (None, 0) and rank is not None and self.losses.absorb(
                        rank, states.get(rank), f"exit {code}"):
                    continue  # a worker the strategy can lose
                if code is not None and code < 0 and rank is not None:
                    # A peer aborted or stopped by a signal is more likely a consequence
                    # than a rank that reported its own error (priority 1).
                    note(0 if killed_by_cause(code) else 1.5, f"rank {rank}",
                         f"rank {rank} killed by {signal_name(code)}")
                elif code not in (None, 0) and not (
                        rank is not None and getattr(states.get(rank), "status", None)
                        == "skipped"):
                    # (a rank that reported itself skipped exits non-zero: judged below)
                    who = f"rank {rank}" if rank is not None else self.spec.launcher
                    note(2, who, self._describe_exit(who, code, states, rank))
            for rank, state in states.items():
                # A rank started directly is judged by its exit code above; this finds ranks
                # under torchrun, mpirun or srun that vanished, whose exit codes dtbench
                # never sees.
                if state.status is None and state.pid and state.host == socket.gethostname() \
                        and rank in self._local_ranks() and rank not in direct \
                        and not psutil.pid_exists(state.pid):
                    note(vanished_priority, f"rank {rank}", f"rank {rank} died (process "
                         f"{state.pid} vanished during {state.phase})")
                if state.status == "failed" and not self.losses.absorb(rank, state,
                                                                        state.error or ""):
                    note(1, f"rank {rank} status", f"rank {rank}: {state.error}", state.ended)
            hung = self._hung_rank(states)
            if hung is not None:
                note(0, "hung", hung)
            killed = self._launcher_failure() if reads_reports else None
            if killed is not None:
                note(-1, killed, killed)
            if not running or (not failures and self._lingering(states)):
                break
            if failures and (time.time() - min(f[1] for f in failures) > GRACE_S
                             or any(f[2] == hung for f in failures)):
                break
            time.sleep(POLL_S)
        if failures and not self._all_ranks_succeeded():
            return min(failures)[2]
        states = self.run_dir.rank_states()
        skipped = [s for s in states.values() if s.status == "skipped"]
        if skipped:
            raise SkipRun(skipped[0].error or "skipped by a rank")
        return None

    def _describe_exit(self, who: str, code: int | None, states: dict[int, RankState],
                       rank: int | None) -> str:
        state = states.get(rank) if rank is not None else None
        if state is not None and state.status == "failed":
            return f"{who}: {state.error}"
        if code < 0:
            return f"{who} killed by {signal_name(code)}"
        tail = last_error_line(self.run_dir)
        return f"{who} exited with code {code}" + (f": {tail}" if tail else "")

    def _all_ranks_succeeded(self) -> bool:
        """Every rank of this node reported success (and node 0 has the result): an abort
        while tearing the process group down afterwards does not undo the measurement."""
        states = self.run_dir.rank_states()
        local = [r for r in self._local_ranks() if (r in states or self.spec.launcher == "local")
                 and r not in self.losses.lost]
        if not local or any(states.get(r) is None or states[r].status != "success"
                            for r in local):
            return False
        return 0 not in self._local_ranks() or self.run_dir.has_results() or self.losses.active

    def _lingering(self, states: dict[int, RankState]) -> bool:
        """The measurement is complete (every local rank succeeded, node 0 has the results)
        and the launcher has still not exited LAUNCHER_EXIT_S later: it is stopped, not
        waited for."""
        if not states or any(s.status != "success" for s in states.values()) \
                or not self._all_ranks_succeeded():
            self.succeeded_at = None
            return False
        now = time.monotonic()
        if self.succeeded_at is None:
            self.succeeded_at = now
        return now - self.succeeded_at > LAUNCHER_EXIT_S

    def _launcher_failure(self) -> str | None:
        """The rank that the launcher's own output says a signal killed, as a failure."""
        for path in self.run_dir.launcher_logs():
            try:
                reason = self.launcher.failure_reason(path.read_text(errors="replace"))
            except OSError:
                continue
            if reason is not None:
                return reason
        return None

    def _hung_rank(self, states: dict[int, RankState]) -> str | None:
        timeout = self.launch.rank_timeout
        now = time.time()
        if not states:
            if time.monotonic() - self.started > timeout:
                return f"no rank started within {timeout:.0f} s"
            return None
        waiting = [s for s in states.values()
                   if s.status is None and s.rank not in self.losses.lost]
        if not waiting:
            return None
        stalest = min(waiting, key=lambda s: (s.beat, s.done))
        if now - stalest.beat > timeout:
            return (f"rank {stalest.rank} hung: no progress for {timeout:.0f} s "
                    f"(last: {stalest.phase} {stalest.done}/{stalest.total})")
        return None

    def _results(self) -> list[dict[str, Any]] | None:
        assembled = self.losses.results()
        if assembled is not None:
            return assembled
        gathered = self.run_dir.read_results()
        if gathered is None:
            if 0 not in self._local_ranks():
                return None
            raise RunFailed("ranks finished but rank 0 wrote no result: "
                            f"{last_error_line(self.run_dir)}")
        return gathered

    def _terminate(self) -> None:
        """SIGTERM the launchers' process groups, SIGKILL what remains, sweep the run id."""
        for proc, _ in self.procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except (ProcessLookupError, PermissionError):
                    pass
        deadline = time.monotonic() + TERM_WAIT_S
        for proc, _ in self.procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for proc, _ in self.procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            if proc.poll() is None:
                proc.wait(timeout=TERM_WAIT_S)
        sweep_run_processes(self.run_id)
