"""`dtbench compare --trajectory A B`: whether two runs trained the same model, step by step.

Each side is one training record with per-step losses (`trajectory`). With as many worker
ranks a side, ranks are paired in order; with different counts (a 2 x 16 run against a 1 x 32
one) each side's step is the mean over its worker ranks weighted by the samples each rank's
loss covers, the loss over the whole step's batch, or the comparison is refused saying why (a
strategy whose replicas differ between exchanges has no one model to average). No rank is
left out. Steps are aligned by their index from the first step both recorded; a step differs
when |a - b| > tolerance × max(1, |a|, |b|) (absolute below 1, relative above). The answer is
the largest difference and the first step, if any, where the runs diverge.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.core.errors import UsageError
from harness.core.spec import KEY_DEFAULTS

TOLERANCE = 1e-5


@dataclass(frozen=True)
class Divergence:
    """Two runs' losses side by side: the worst step, and the first beyond the tolerance."""

    ranks: int
    steps: int
    max_difference: float
    worst_step: int | None
    first_divergent_step: int | None
    tolerance: float
    # how the ranks were compared, where not pair by pair
    how: str = ""

    @property
    def same(self) -> bool:
        return self.first_divergent_step is None

    def render(self, a: str, b: str) -> str:
        compared = self.how or f"{self.ranks} worker rank(s)"
        lines = [f"compared {self.steps} step(s) of {compared}: {a} vs {b}",
                 f"largest loss difference {self.max_difference:.3g}"
                 + (f" at step {self.worst_step}" if self.worst_step is not None else "")]
        if self.same:
            lines.append(f"same trajectory within {self.tolerance:g}")
        else:
            lines.append(f"diverged at step {self.first_divergent_step} (beyond "
                         f"{self.tolerance:g})")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {"ranks": self.ranks, "how": self.how or "rank by rank",
                "steps": self.steps, "max_difference": self.max_difference,
                "worst_step": self.worst_step, "same": self.same,
                "first_divergent_step": self.first_divergent_step, "tolerance": self.tolerance}


def only_trajectory(records: list[dict[str, Any]], source: str) -> dict[str, Any]:
    """The one training record of a side that holds losses (its trajectory, with the spec it
    ran under beside it as `spec`)."""
    having = [r for r in records if r.get("status") == "success"
              and isinstance(r.get("trajectory"), dict) and r["trajectory"].get("losses")]
    if len(having) != 1:
        raise UsageError(f"{source}: --trajectory needs exactly one successful record with "
                         f"per-step losses, found {len(having)}")
    spec = having[0].get("spec")
    return {**having[0]["trajectory"], "spec": spec if isinstance(spec, dict) else {}}


def rank_weights(trajectory: dict[str, Any]) -> list[float]:
    """The samples each worker rank's loss covers a step: the step's samples shared evenly
    where the ranks are the run's data-parallel replicas (each takes batch_per_rank);
    UsageError saying why not otherwise."""
    from harness.strategies import STRATEGIES

    spec, workers = trajectory.get("spec") or {}, len(trajectory["losses"])
    strategy = str(spec.get("strategy") or KEY_DEFAULTS["strategy"])
    batch, total = spec.get("batch_per_rank"), trajectory.get("samples_per_step")
    known = STRATEGIES.get(strategy) if strategy in STRATEGIES.names() else None
    if workers > 1 and known is not None and not (known.synchronous and known.one_model):
        raise UsageError(f"--trajectory: the {workers} worker ranks of a {strategy} run train "
                         "replicas that differ between exchanges: no mean over them is one "
                         "model's loss to compare with a run of another rank count")
    if not isinstance(batch, int) or not isinstance(total, int) or workers * batch != total:
        raise UsageError(f"--trajectory: the {workers} worker rank(s) do not each cover "
                         f"batch_per_rank ({batch}) of the {total} samples a step, so their "
                         "losses cannot be weighted by samples to compare with a run of "
                         "another rank count")
    return [float(batch)] * workers


def weighted_mean(trajectory: dict[str, Any]) -> list[float | None]:
    """The loss over each step's whole batch: the worker ranks' losses weighted by their
    samples (None at a step where a rank has none)."""
    weights = rank_weights(trajectory)
    steps = min(len(row) for row in trajectory["losses"])
    found: list[float | None] = []
    for k in range(steps):
        values = [row[k] for row in trajectory["losses"]]
        found.append(None if any(v is None for v in values) else
                     sum(w * v for w, v in zip(weights, values, strict=True)) / sum(weights))
    return found


def compare_trajectories(a: dict[str, Any], b: dict[str, Any],
                         tolerance: float = TOLERANCE) -> Divergence:
    """Pair the worker ranks in order (or, with different counts, each side's mean over its
    ranks weighted by samples) and align the steps both recorded."""
    first = max(int(a.get("first_step", 0)), int(b.get("first_step", 0)))
    if not a["losses"] or not b["losses"]:
        raise UsageError("--trajectory: no worker rank on one side has losses")
    if a.get("samples_per_step") != b.get("samples_per_step"):
        raise UsageError(f"--trajectory: the runs consume {a.get('samples_per_step')} and "
                         f"{b.get('samples_per_step')} samples a step: not the same training")
    how = ""
    pairs = list(zip(a["losses"], b["losses"], strict=True)) \
        if len(a["losses"]) == len(b["losses"]) else []
    if not pairs:
        pairs = [(weighted_mean(a), weighted_mean(b))]
        how = (f"the loss over each step's {a.get('samples_per_step')} samples: the mean over "
               f"{len(a['losses'])} and {len(b['losses'])} worker rank(s), weighted by samples")
    worst, worst_step, divergent = 0.0, None, None
    steps = 0
    skip_a, skip_b = first - int(a.get("first_step", 0)), first - int(b.get("first_step", 0))
    for left, right in pairs:
        aligned = list(zip(left[skip_a:], right[skip_b:], strict=False))
        steps = max(steps, len(aligned))
        for k, (x, y) in enumerate(aligned):
            if x is None or y is None:
                continue
            difference = abs(x - y)
            if difference > worst:
                worst, worst_step = difference, first + k
            if difference > tolerance * max(1.0, abs(x), abs(y)):
                step = first + k
                divergent = step if divergent is None else min(divergent, step)
    return Divergence(len(pairs), steps, worst, worst_step, divergent, tolerance, how)
