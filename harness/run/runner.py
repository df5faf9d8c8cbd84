"""From a resolved spec to a stored record: availability, worker, collectors, store."""
from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.collectors import CollectContext, collect
from harness.collectors.energy import energy_absent_reason
from harness.core.errors import RunFailed, SkipRun, status_of
from harness.core.spec import LaunchOptions, RunSpec
from harness.core.text import one_line
from harness.microbench.peak import peak_for
from harness.rank.loops import run_throughput, run_time_to_train
from harness.records.fingerprint import harness_info, machine_info, software_info, with_nodes
from harness.records.record import Metric, build_record, new_run_id, utc_now
from harness.records.rundir import RankResult
from harness.records.store import Store
from harness.run.autocompile import Choice, ipex_unusable, settle_all
from harness.run.progress import Progress
from harness.run.supervisor import Supervisor
from workloads.flops import count_flops_per_sample


def unavailable_reason(spec: RunSpec) -> str | None:
    """Why this valid spec cannot run on this machine, or None when it can."""
    from backends import first_unavailable
    from workloads import get_workload

    reason = first_unavailable([("backend", spec.backend), ("comm", spec.comm),
                                ("launcher", spec.launcher)])
    if reason is not None:
        return reason
    try:
        get_workload(spec.workload).check(spec.backend, spec.precision, spec.mode, spec.size)
    except NotImplementedError as exc:
        return one_line(str(exc)) or f"{spec.workload} does not support this combination"
    from harness.strategies import STRATEGIES

    if spec.ipex and (unusable := ipex_unusable(spec)) is not None:
        return f"--ipex on: {unusable}"
    return STRATEGIES.get(spec.strategy).unsupported(spec)


def check_replicas(ranks: list[RankResult]) -> None:
    """With DTBENCH_CHECK_SYNC=1 ranks record a parameter checksum per step; they must agree."""
    reference = ranks[0].param_checksums
    for other in ranks[1:]:
        for step, (mine, theirs) in enumerate(zip(reference, other.param_checksums,
                                                   strict=False)):
            if mine != theirs:
                raise RunFailed(f"replicas diverged at step {step}: rank 0 and rank "
                                f"{other.rank} hold different parameters")


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
    """Runs specs one after another in this process and stores one record per run."""

    def __init__(self, store: Store, progress: Progress | None = None,
                 launch: LaunchOptions | None = None) -> None:
        self.store = store
        self.launch = launch or LaunchOptions()
        self.progress = progress or Progress(0, enabled=False)
        self._machine: dict[str, Any] | None = None
        self._software: dict[str, Any] | None = None

    def _fingerprint(self) -> tuple[dict[str, Any], dict[str, Any]]:
        if self._machine is None or self._software is None:
            self._machine, self._software = machine_info(), software_info()
        return self._machine, self._software

    def run(self, spec: RunSpec) -> Outcome | None:
        """Run and store one record; None on a non-zero node of a multi-node job."""
        created = utc_now()
        run_id = new_run_id(spec.workload, created)
        self.progress.begin(spec.label())
        status, error = "success", None
        ranks: list[RankResult] = []
        traceback_tail: list[str] = []
        context = CollectContext(spec=spec, ranks=ranks,
                                 baseline=self.store.find_baseline(spec)
                                 if spec.world_size > 1 else None)
        reason = unavailable_reason(spec)
        choices: dict[str, Choice] = {}
        if reason is not None:
            status, error = "skipped", reason
        else:
            try:
                if {spec.compile_mode, spec.ipex_mode} & {"auto", "default"}:
                    self.progress.update("settling IPEX and compile", 0, 1)
                    spec, choices = settle_all(spec)
                    context.spec = spec
                results = self._execute(spec, run_id, context)
                if results is None:
                    self.progress.end(f"node {self.launch.node_rank} done; node 0 records")
                    return None
                ranks.extend(results)
            except KeyboardInterrupt:
                # The interrupted run leaves nothing behind: no record, no partial MLPerf log.
                self._log_path(run_id).unlink(missing_ok=True)
                raise
            except Exception as exc:  # noqa: BLE001 - any crash of a run becomes a failed record
                status, error = status_of(exc)
                if not isinstance(exc, (SkipRun, RunFailed)):
                    error = f"rank 0: {error}"
                    traceback_tail = traceback.format_exc(limit=-3).splitlines()[-6:]
                elif isinstance(exc, RunFailed):
                    traceback_tail = exc.log_tail
        metrics: list[Metric] = collect(context) if ranks else []
        if status == "success" and spec.mode == "ttt" and ranks and not ranks[0].target_reached:
            status, error = "failed", self._ttt_failure(spec, ranks[0])
        machine, software = self._fingerprint()
        machine = with_nodes(machine, spec.nnodes, [rank.node for rank in ranks])
        notes: dict[str, Any] = {}
        if ranks:
            notes["settings"] = ranks[0].settings
            if ranks[0].param_checksums:
                notes["replicas_checked_steps"] = min(len(r.param_checksums) for r in ranks)
            notes["device_name"] = ranks[0].device_name
            absent = energy_absent_reason(context)
            if absent:
                notes["energy_unavailable"] = absent
        for switch, choice in choices.items():
            notes[switch] = choice.as_dict()
        if traceback_tail:
            notes["traceback_tail"] = traceback_tail
        record = build_record(
            run_id=run_id, created=created, status=status, error=error,
            harness=harness_info(), machine=machine, software=software,
            spec=spec.as_dict(), metrics=metrics,
            events=ranks[0].events if ranks else [],
            extra={"spec_key": spec.key(), "notes": notes})
        path = self.store.add(record)
        self.progress.end(status if error is None else f"{status}: {one_line(error, 160)}")
        return Outcome(record, path)

    def _execute(self, spec: RunSpec, run_id: str,
                 context: CollectContext) -> list[RankResult] | None:
        from workloads import get_workload

        context.flops_per_sample = count_flops_per_sample(get_workload(spec.workload), spec.size)
        log_path = self._log_path(run_id) if spec.mode == "ttt" else None
        if spec.distributed:
            gathered = Supervisor(spec, self.launch, run_id, self.progress.update,
                                  log_path).run()
            if gathered is None:
                return None
            results = [RankResult.from_dict(d) for d in gathered]
            from harness.strategies import STRATEGIES

            if STRATEGIES.get(spec.strategy).replicas_match(spec):
                check_replicas(results)
        elif spec.mode == "ttt":
            results = [run_time_to_train(spec, log_path, progress=self.progress.update)]
        else:
            results = [run_throughput(spec, progress=self.progress.update)]
        if spec.peak == "cached":
            lead = results[0]
            threads = int(lead.settings.get("threads", spec.threads))
            if spec.backend == "cpu":
                threads *= spec.nproc_per_node  # the ranks of a node share its CPU peak
            context.peak = peak_for(spec.backend, lead.device_name, spec.precision, threads)
        return results

    def _log_path(self, run_id: str) -> Path:
        return self.store.root / "logs" / f"{run_id}.mllog"

    @staticmethod
    def _ttt_failure(spec: RunSpec, lead: RankResult) -> str:
        from workloads import get_workload

        target = get_workload(spec.workload).preset(spec.size).target
        reached = (lead.quality or {}).get(target.metric, float("nan"))
        comparison = ">=" if target.higher_is_better else "<="
        return (f"target {target.metric} {comparison} {target.value} not reached in "
                f"{target.max_epochs} epochs: reached {reached:.4g}")
