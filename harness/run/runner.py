"""From a planned spec to a stored record, one stage after the other and each once: preflight
(harness/run/preflight.py), launch (launch.py), collect (collect.py), record (recorder.py),
store (harness/store/directory.py)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.core.text import one_line
from harness.machine import load as machine_load
from harness.records.provenance import Provenance
from harness.records.record import new_run_id, utc_now
from harness.run.collect import collect_run
from harness.run.launch import launch
from harness.run.preflight import Ready, preflight
from harness.run.progress import Progress
from harness.run.recorder import Recorder, Verdict
from harness.run.traces import keep_traces
from harness.rundir import RankResult
from harness.spec.kinds import TRAINING
from harness.spec.specs import LaunchOptions, RunSpec
from harness.store.contract import RunStore


def _node_cores(spec: RunSpec, ranks: list[RankResult] | None) -> float | None:
    """The CPU threads the run's ranks on one node asked for (they ran with them, in their
    settings), or None where a rank does not say (the busy mark then counts the whole
    machine)."""
    threads = [r.settings.get("threads") for r in ranks or []]
    if not threads or not all(isinstance(t, int) and t > 0 for t in threads):
        return None
    return sum(threads) / max(1, spec.nnodes)


@dataclass
class Outcome:
    """A finished run: its record and where the store put it."""

    record: dict[str, Any]
    path: Path | None
    notes: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        return str(self.record["status"])


class Runner:
    """Runs specs one after another, each in rank processes of its own, and stores one record
    per run."""

    def __init__(self, store: RunStore, progress: Progress | None = None,
                 launch: LaunchOptions | None = None,
                 provenance: Provenance | None = None) -> None:
        self.store = store
        self.launch = launch or LaunchOptions()
        self.progress = progress or Progress(0, enabled=False)
        self.recorder = Recorder(provenance)

    def run(self, spec: RunSpec) -> Outcome | None:
        """Run and store one record; None on a non-zero node of a multi-node job."""
        created = utc_now()
        run_id = new_run_id(spec.workload, created)
        log_path = self._log_path(run_id) if spec.mode == "ttt" else None
        self.progress.begin(TRAINING.label(spec.as_dict()))
        ready, verdict = Ready(spec), Verdict()
        ranks: list[RankResult] = []
        load: dict[str, Any] | None = None
        try:
            ready = preflight(spec, self.progress.update)
            if ready.skip is not None:
                verdict = Verdict("skipped", ready.skip)
            else:
                before = machine_load.sample()
                launched = launch(ready.spec, self.launch, run_id, self.progress.update,
                                  log_path)
                load = machine_load.load_between(before, machine_load.sample(),
                                                 _node_cores(ready.spec, launched))
                if launched is None:
                    self.progress.end(f"node {self.launch.node_rank} done; node 0 records")
                    return None
                ranks = launched
        except KeyboardInterrupt:
            # The interrupted run leaves nothing behind: no record, no partial MLPerf log.
            if log_path is not None:
                log_path.unlink(missing_ok=True)
            raise
        except Exception as exc:  # noqa: BLE001 - any crash of a run becomes a failed record
            verdict = Verdict.of(exc)
        collected = collect_run(ready.spec, ranks, ready.peak, self.store)
        traces = keep_traces(self.store, run_id, ranks)
        if traces:
            collected.notes["traces"] = traces
        if verdict.status == "success" and collected.failure is not None:
            verdict = Verdict("failed", collected.failure)
        record = self.recorder.record(run_id, created, ready, verdict, ranks, collected,
                                      load)
        path = self.store.add(record)
        self.progress.end(verdict.status if verdict.error is None
                          else f"{verdict.status}: {one_line(verdict.error, 160)}")
        return Outcome(record, path)

    def _log_path(self, run_id: str) -> Path:
        return self.store.root / "logs" / f"{run_id}.mllog"
