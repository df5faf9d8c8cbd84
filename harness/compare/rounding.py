"""How far two runs of the same training may part by rounding alone: the tolerance of
`compare --trajectory`, from the arithmetic rather than a constant fitted to measurements.

Two runs that train the same model on the same samples differ only in the order of their
floating-point reductions: another rank count splits a gradient's sum over the batch and adds
the parts in an all-reduce, tensor parallelism splits inner products, kernels block them by
thread count. A sum of n terms, in any order, is within γ_n = n·u / (1 − n·u) of the exact sum
relative to the sum of the terms' magnitudes (Higham, Accuracy and Stability of Numerical
Algorithms, 2002, §4.2; u is the precision's unit roundoff, 2^-24 for fp32). The longest such
sum in a step is a weight's gradient: one term per (sample, position) of the step's global batch
(positions: a language model's tokens, an image's pixels, which bound a convolution's output
positions), so n = samples per step × positions per sample.

Step k's loss comes after k updates, each from a gradient with that relative error, and from a
forward pass whose loss is itself a mean of n non-negative terms. To first order each error
reaches the loss once, scaled by the loss's size (an update moves a cross-entropy by at most
about the loss itself), and none is amplified by the training: each run is within
(k + 1)·γ_n·max(1, |loss|) of exact arithmetic, and the two runs within

    τ_k = 2·(k + 1)·γ_n·max(1, |a_k|, |b_k|)

of each other (absolute below a loss of 1, relative above). Equivalent runs land far inside it
while the training does not amplify rounding (gpt tiny on its synthetic batch: 1e-6 against a
bound of 6e-4 to 2e-3); a wrong learning rate or gradient scale changes every update by its own
relative size (1e-2 for a rate off by 1%), far above γ_n (3e-5 for gpt tiny's 512 terms), and
leaves the bound within a few steps. Where the training does amplify rounding (on real text
gpt tiny's orderings can part by 2.7e-2 at step 18, where a rate off by 0.1% moves the loss by
4.3e-2), the first-order assumption fails and so does the bound: `--tolerance` then states
one. docs/guide/reports.md has the measurements.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.core.errors import UsageError

# unit roundoff of the arithmetic each precision's matrix products and reductions use: autocast
# rounds their inputs to bf16 or fp16
UNIT_ROUNDOFF = {"fp32": 2.0 ** -24, "bf16": 2.0 ** -8, "fp16": 2.0 ** -11}


@dataclass(frozen=True)
class Bound:
    """The largest |a - b| at a step that still counts as the same loss."""

    # a stated relative tolerance (--tolerance), else None: the rounding bound below
    given: float | None = None
    precision: str = "fp32"
    terms: int = 1  # n: the longest reduction the runs may order differently
    samples: int = 1
    positions: int = 1

    @property
    def gamma(self) -> float:
        """γ_n = n·u / (1 − n·u): the relative error bound of a sum of n terms."""
        nu = self.terms * UNIT_ROUNDOFF[self.precision]
        return nu / (1.0 - nu)

    def at(self, step: int, a: float, b: float) -> float:
        scale = max(1.0, abs(a), abs(b))
        if self.given is not None:
            return self.given * scale
        return 2.0 * (step + 1) * self.gamma * scale

    def describe(self) -> str:
        if self.given is not None:
            return f"the given tolerance {self.given:g} x max(1, |loss|)"
        u = UNIT_ROUNDOFF[self.precision]
        return (f"the {self.precision} rounding bound 2(k+1)·γ_n·max(1, |loss|) at step k, "
                f"γ_n = n·u/(1 - n·u) = {self.gamma:.3g} for n = {self.terms} "
                f"({self.samples} samples x {self.positions} positions), u = 2^{_log2(u)}")

    def as_dict(self) -> dict[str, Any]:
        if self.given is not None:
            return {"kind": "given", "relative": self.given}
        return {"kind": "rounding", "precision": self.precision, "terms": self.terms,
                "unit_roundoff": UNIT_ROUNDOFF[self.precision], "gamma": self.gamma,
                "formula": "2 (k+1) gamma_n max(1, |a_k|, |b_k|)"}


def _log2(value: float) -> int:
    import math

    return round(math.log2(value))


def rounding_bound(spec: dict[str, Any], samples: int, other_spec: dict[str, Any],
                   given: float | None = None) -> Bound:
    """The bound for two runs consuming `samples` a step, of a side's spec (its workload, size
    and precision); the given tolerance instead where there is one. UsageError where the
    precision's rounding leaves no bound (n·u ≥ 1) or the sides' precisions differ."""
    if given is not None:
        return Bound(given=given)
    precision = str(spec.get("precision") or "fp32")
    if precision != str(other_spec.get("precision") or "fp32"):
        raise UsageError(f"--trajectory: the runs compute in {precision} and "
                         f"{other_spec.get('precision')}: no common rounding bound; give "
                         "--tolerance T")
    if precision not in UNIT_ROUNDOFF:
        raise UsageError(f"--trajectory: no unit roundoff known for {precision!r}; give "
                         "--tolerance T")
    positions = positions_per_sample(spec)
    bound = Bound(precision=precision, terms=samples * positions, samples=samples,
                  positions=positions)
    if bound.terms * UNIT_ROUNDOFF[precision] >= 1.0:
        raise UsageError(f"--trajectory: {precision}'s unit roundoff times the {bound.terms} "
                         "terms of a gradient's sum leaves no rounding bound (n·u ≥ 1); give "
                         "--tolerance T")
    return bound


def positions_per_sample(spec: dict[str, Any]) -> int:
    """Terms one sample adds to a weight's gradient sum (Workload.positions_per_sample); 1
    where the workload is not known here."""
    from workloads import WORKLOADS, get_workload

    name, size = spec.get("workload"), spec.get("size")
    if not isinstance(name, str) or name not in WORKLOADS.names():
        return 1
    try:
        return get_workload(name).positions_per_sample(str(size))
    except UsageError:
        return 1
