"""`dtbench compare --trajectory A B`: whether two runs trained the same model, step by step.

Each side is one training record with per-step losses (`trajectory`). With as many worker
ranks a side, ranks are paired in order; with different counts (a 2 x 16 run against a 1 x 32
one) each side's step is the mean over its worker ranks weighted by the samples each rank's
loss covers, the loss over the whole step's batch, or the comparison is refused saying why (a
strategy whose replicas differ between exchanges has no one model to average). No rank is
left out. Both sides must have seen the same samples each step (trajectory.sampling: refused
saying why where they cannot have). Steps are aligned by their index from the first step both
recorded; a step differs when |a - b| is beyond what rounding alone can do (rounding.py: the
precision's bound at that step, or a given tolerance × max(1, |a|, |b|)). The answer is the
largest difference, the first step, if any, where the runs diverge, and the bound used.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.compare.rounding import Bound, rounding_bound
from harness.core.errors import UsageError
from harness.spec.specs import KEY_DEFAULTS


@dataclass(frozen=True)
class Divergence:
    """Two runs' losses side by side: the worst step, and the first beyond the tolerance."""

    ranks: int
    steps: int
    max_difference: float
    worst_step: int | None
    first_divergent_step: int | None
    bound: Bound
    # how the ranks were compared, where not pair by pair
    how: str = ""
    # the samples both sides saw, and what the reader should know about them
    samples: str = ""
    notes: tuple[str, ...] = ()
    # the bound at the worst step and at the first divergent one
    bound_at_worst: float | None = None
    bound_at_divergence: float | None = None
    # why the runs are other trainings from the start, whatever their losses (other seeds)
    parted: str = ""

    @property
    def same(self) -> bool:
        return self.first_divergent_step is None

    def render(self, a: str, b: str) -> str:
        compared = self.how or f"{self.ranks} worker rank(s)"
        worst = (f" at step {self.worst_step} (bound there {self.bound_at_worst:.3g})"
                 if self.worst_step is not None and self.bound_at_worst is not None else "")
        verdict = ("same trajectory" if self.same else
                   f"diverged at step {self.first_divergent_step} ({self.parted})"
                   if self.parted else
                   f"diverged at step {self.first_divergent_step} (bound there "
                   f"{self.bound_at_divergence:.3g})")
        lines = [f"{verdict}: {a} vs {b}",
                 f"largest loss difference {self.max_difference:.3g}{worst}",
                 f"bound: {self.bound.describe()}",
                 f"compared {self.steps} step(s) of {compared}",
                 *([f"samples: {self.samples}"] if self.samples else []),
                 *(f"note: {note}" for note in self.notes)]
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {"ranks": self.ranks, "how": self.how or "rank by rank",
                "steps": self.steps, "max_difference": self.max_difference,
                "worst_step": self.worst_step, "same": self.same,
                "first_divergent_step": self.first_divergent_step,
                "bound": {**self.bound.as_dict(), "described": self.bound.describe(),
                          "at_worst_step": self.bound_at_worst,
                          "at_first_divergent_step": self.bound_at_divergence},
                "samples": self.samples, "notes": list(self.notes),
                "other_start": self.parted or None}


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


def sampling_of(trajectory: dict[str, Any]) -> str:
    """How a side's samples were drawn (harness/rank/feed.py SAMPLINGS); for a record written
    before trajectory.sampling, what that version did: files and time-to-train shuffled as
    now, synthetic batches per data shard."""
    from harness.rank.feed import SAMPLINGS

    found = trajectory.get("sampling")
    if isinstance(found, str) and found in SAMPLINGS:
        return found
    spec = trajectory.get("spec") or {}
    return "shuffled" if spec.get("mode") == "ttt" or spec.get("data") else "per-shard"


def same_samples(a: dict[str, Any], b: dict[str, Any]) -> tuple[str, list[str]]:
    """What both sides saw each step, with notes on what may still set them apart; UsageError
    saying why where they cannot have seen the same samples."""
    from harness.rank.feed import SAMPLINGS

    kind, other = sampling_of(a), sampling_of(b)
    spec_a, spec_b = a.get("spec") or {}, b.get("spec") or {}
    if kind != other:
        raise UsageError(f"--trajectory: the runs saw different samples: the baseline's were "
                         f"{SAMPLINGS[kind]}; the candidate's {SAMPLINGS[other]}")
    modes = [spec.get("mode") or "throughput" for spec in (spec_a, spec_b)]
    if modes[0] != modes[1]:
        raise UsageError(f"--trajectory: a {modes[0]} run and a {modes[1]} run read different "
                         "samples (time-to-train holds some out for evaluation)")
    if kind == "per-shard":
        shards = [(len(side["losses"]), (side.get("spec") or {}).get("batch_per_rank"))
                  for side in (a, b)]
        if shards[0] != shards[1]:
            raise UsageError(
                "--trajectory: the runs saw different samples: both drew their synthetic "
                "batches per data shard from seed + shard index (records written before "
                "samples were drawn by global index), so {} shard(s) of {} and {} of {} "
                "samples do not see the same ones; rerun both with this dtbench".format(
                    *shards[0], *shards[1]))
    notes = []
    paths = [spec.get("data") for spec in (spec_a, spec_b)]
    if paths[0] != paths[1]:
        notes.append(f"the runs read --data {paths[0]} and {paths[1]}: the same samples only "
                     "if these hold the same files")
    return SAMPLINGS[kind], notes


def other_start(a: dict[str, Any], b: dict[str, Any]) -> str:
    """Why the runs are other trainings from their first step ("" where nothing says so): other
    seeds draw other first parameters and other samples, whatever the losses show (lstm tiny's
    two seeds start 1.1e-3 apart, inside its loss's rounding bound)."""
    seeds = [(side.get("spec") or {}).get("seed") or 0 for side in (a, b)]
    if seeds[0] == seeds[1]:
        return ""
    return f"the seeds differ, {seeds[0]} and {seeds[1]}: other first parameters and samples"


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
                         tolerance: float | None = None) -> Divergence:
    """Pair the worker ranks in order (or, with different counts, each side's mean over its
    ranks weighted by samples) and align the steps both recorded; a step differs beyond the
    rounding bound of the runs' precision, or beyond `tolerance` x max(1, |loss|) when given."""
    first = max(int(a.get("first_step", 0)), int(b.get("first_step", 0)))
    if not a["losses"] or not b["losses"]:
        raise UsageError("--trajectory: no worker rank on one side has losses")
    if a.get("samples_per_step") != b.get("samples_per_step"):
        raise UsageError(f"--trajectory: the runs consume {a.get('samples_per_step')} and "
                         f"{b.get('samples_per_step')} samples a step: not the same training")
    samples, notes = same_samples(a, b)
    per_step = a.get("samples_per_step")
    if not isinstance(per_step, int) or per_step < 1:
        raise UsageError(f"--trajectory: samples_per_step {per_step!r} is not a count")
    bound = rounding_bound(a.get("spec") or {}, per_step, b.get("spec") or {}, tolerance)
    how = ""
    pairs = list(zip(a["losses"], b["losses"], strict=True)) \
        if len(a["losses"]) == len(b["losses"]) else []
    if not pairs:
        pairs = [(weighted_mean(a), weighted_mean(b))]
        how = (f"the loss over each step's {a.get('samples_per_step')} samples: the mean over "
               f"{len(a['losses'])} and {len(b['losses'])} worker rank(s), weighted by samples")
    worst, worst_step, divergent = 0.0, None, None
    at_worst = at_divergence = None
    steps = 0
    skip_a, skip_b = first - int(a.get("first_step", 0)), first - int(b.get("first_step", 0))
    for left, right in pairs:
        aligned = list(zip(left[skip_a:], right[skip_b:], strict=False))
        steps = max(steps, len(aligned))
        for k, (x, y) in enumerate(aligned):
            if x is None or y is None:
                continue
            difference, allowed = abs(x - y), bound.at(first + k, x, y)
            if difference > worst or worst_step is None:
                worst, worst_step, at_worst = difference, first + k, allowed
            if difference > allowed and (divergent is None or first + k < divergent):
                divergent, at_divergence = first + k, allowed
    parted = other_start(a, b)
    if parted and steps:
        divergent, at_divergence = first, None
    return Divergence(len(pairs), steps, worst, worst_step, divergent, bound, how, samples,
                      tuple(notes), at_worst, at_divergence, parted)
