"""`dtbench compare --trajectory A B`: whether two runs trained the same model, step by step.

Each side is one training record with per-step losses (`trajectory`). Worker ranks are paired
in order and steps aligned by their index from the first step both recorded; a step differs
when |a - b| > tolerance × max(1, |a|, |b|) (absolute below 1, relative above). The answer is
the largest difference and the first step, if any, where the runs diverge.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.core.errors import UsageError

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

    @property
    def same(self) -> bool:
        return self.first_divergent_step is None

    def render(self, a: str, b: str) -> str:
        lines = [f"compared {self.steps} step(s) of {self.ranks} worker rank(s): {a} vs {b}",
                 f"largest loss difference {self.max_difference:.3g}"
                 + (f" at step {self.worst_step}" if self.worst_step is not None else "")]
        if self.same:
            lines.append(f"same trajectory within {self.tolerance:g}")
        else:
            lines.append(f"diverged at step {self.first_divergent_step} (beyond "
                         f"{self.tolerance:g})")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {"ranks": self.ranks, "steps": self.steps, "max_difference": self.max_difference,
                "worst_step": self.worst_step, "same": self.same,
                "first_divergent_step": self.first_divergent_step, "tolerance": self.tolerance}


def only_trajectory(records: list[dict[str, Any]], source: str) -> dict[str, Any]:
    """The one training record of a side that holds losses."""
    having = [r for r in records if r.get("status") == "success"
              and isinstance(r.get("trajectory"), dict) and r["trajectory"].get("losses")]
    if len(having) != 1:
        raise UsageError(f"{source}: --trajectory needs exactly one successful record with "
                         f"per-step losses, found {len(having)}")
    return having[0]["trajectory"]


def compare_trajectories(a: dict[str, Any], b: dict[str, Any],
                         tolerance: float = TOLERANCE) -> Divergence:
    """Pair the worker ranks in order and align the steps both recorded."""
    first = max(int(a.get("first_step", 0)), int(b.get("first_step", 0)))
    pairs = list(zip(a["losses"], b["losses"], strict=False))
    if not pairs:
        raise UsageError("--trajectory: no worker rank on one side has losses")
    if a.get("samples_per_step") != b.get("samples_per_step"):
        raise UsageError(f"--trajectory: the runs consume {a.get('samples_per_step')} and "
                         f"{b.get('samples_per_step')} samples a step: not the same training")
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
    return Divergence(len(pairs), steps, worst, worst_step, divergent, tolerance)
