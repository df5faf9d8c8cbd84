"""Launch the ranks of a spec past its preflight and bring back what each measured.

Every run takes this path, one rank without a communication backend included: its ranks are
processes of their own, started by the spec's launcher under the supervisor, so that threads,
affinity, faults, logs and memory are the same for a run of one rank as for a run of many,
and no run inherits what an earlier one left in this process.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from harness.core.errors import RunFailed
from harness.run.supervisor import Supervisor
from harness.rundir import RankResult
from harness.spec.specs import LaunchOptions, RunSpec


def check_replicas(ranks: list[RankResult]) -> None:
    """With DTBENCH_CHECK_SYNC=1 ranks record a parameter checksum per step; they must agree."""
    reference = ranks[0].param_checksums
    for other in ranks[1:]:
        for step, (mine, theirs) in enumerate(zip(reference, other.param_checksums,
                                                   strict=False)):
            if mine != theirs:
                raise RunFailed(f"replicas diverged at step {step}: rank 0 and rank "
                                f"{other.rank} hold different parameters")


def launch(spec: RunSpec, options: LaunchOptions, run_id: str,
           progress: Callable[[str, int, int], None],
           log_path: Path | None = None) -> list[RankResult] | None:
    """Every rank's result; None on a node other than node 0, which writes no record."""
    gathered = Supervisor(spec, options, run_id, progress, log_path).run()
    if gathered is None:
        return None
    ranks = [RankResult.from_dict(report) for report in gathered]
    from harness.strategies import STRATEGIES

    if STRATEGIES.get(spec.strategy).replicas_match(spec):
        check_replicas(ranks)
    return ranks
