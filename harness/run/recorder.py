"""Record a run: its status, the spec as it ran, its metrics and notes, with the fingerprint
of this machine and its software, as one record for the store."""
from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from harness.comm.nccl_log import nccl_summary
from harness.core.errors import RunFailed, SkipRun, status_of
from harness.machine.fingerprint import harness_info, machine_info, software_info, with_nodes
from harness.records.provenance import Provenance
from harness.records.record import build_record
from harness.run.collect import Collected
from harness.run.preflight import Ready
from harness.rundir import RankResult


@dataclass(frozen=True)
class Verdict:
    """How a run ended: success, skipped or failed, why, and the end of the failing code's
    traceback where there is one."""

    status: str = "success"
    error: str | None = None
    traceback_tail: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, exc: Exception) -> Verdict:
        """The verdict on a run that raised `exc` (called while it is being handled)."""
        status, error = status_of(exc)
        if isinstance(exc, RunFailed):
            return cls(status, error, exc.log_tail)
        if isinstance(exc, SkipRun):
            return cls(status, error)
        return cls(status, error, traceback.format_exc(limit=-3).splitlines()[-6:])


class Recorder:
    """Builds the records of one invocation; the machine and its software are read once."""

    def __init__(self, provenance: Provenance | None = None) -> None:
        self.provenance = provenance or Provenance()
        self._machine: dict[str, Any] | None = None
        self._software: dict[str, Any] | None = None
        self._code: dict[str, Any] | None = None

    def _fingerprint(self) -> tuple[dict[str, Any], dict[str, Any]]:
        if self._machine is None or self._software is None:
            self._machine = self.provenance.machine_entry(machine_info())
            self._software = software_info()
        return self._machine, self._software

    def _code_under_test(self) -> dict[str, Any]:
        if self._code is None:
            self._code = self.provenance.code()
        return self._code

    def record(self, run_id: str, created: datetime, ready: Ready, verdict: Verdict,
               ranks: list[RankResult], collected: Collected,
               load: dict[str, Any] | None = None) -> dict[str, Any]:
        """The record of a run: what the stages before decided, measured and collected."""
        spec = ready.spec
        machine, software = self._fingerprint()
        machine = with_nodes(machine, spec.nnodes, [rank.node for rank in ranks])
        notes = dict(collected.notes)
        for switch, choice in ready.choices.items():
            notes[switch] = choice.as_dict()
        if verdict.traceback_tail:
            notes["traceback_tail"] = verdict.traceback_tail
        nccl = nccl_summary([rank.nccl for rank in ranks])
        return build_record(
            run_id=run_id, created=created, status=verdict.status, error=verdict.error,
            harness=harness_info(), machine=machine, software=software,
            spec=spec.as_dict(), metrics=collected.metrics,
            events=ranks[0].events if ranks else [],
            extra={"spec_key": spec.key(), "code": self._code_under_test(), "notes": notes,
                   **({"load": load} if load is not None else {}),
                   **({"nccl": nccl} if nccl is not None else {}),
                   **({"trajectory": collected.trajectory} if collected.trajectory else {})})
