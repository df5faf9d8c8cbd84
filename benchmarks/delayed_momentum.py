"""How far a stale gradient shrinks the stable step of momentum SGD, on a quadratic.

Heavy ball with a gradient d versions old, on f(x) = h x^2 / 2:
    m_t = mu m_(t-1) + h x_(t-d),    x_(t+1) = x_t - a m_t
is stable while every eigenvalue of its companion matrix lies inside the unit circle. This
prints, for each momentum mu and delay d, the largest a*h that stays stable (d = 0 is
synchronous SGD; ps-async with two workers and ssp with s=1 apply gradients about one
version old). No timing, no randomness: a linear-algebra table behind the account in
docs/measurements/strategies.md of why the asynchronous rules lose stability at the workload's
momentum of 0.9.

    python benchmarks/delayed_momentum.py
"""
from __future__ import annotations

import numpy as np

MOMENTA = (0.9, 0.8, 0.5, 0.0)
DELAYS = (0, 1, 2, 3)


def spectral_radius(step: float, momentum: float, delay: int) -> float:
    """Largest |eigenvalue| of the update x_(t+1) = x_t - step (mu m + x_(t-delay)), h=1."""
    size = delay + 2  # x_t ... x_(t-delay), then m_(t-1)
    matrix = np.zeros((size, size))
    matrix[0, 0] = 1.0
    matrix[0, delay] -= step
    matrix[0, size - 1] -= step * momentum
    for lag in range(1, delay + 1):
        matrix[lag, lag - 1] = 1.0
    matrix[size - 1, delay] = 1.0
    matrix[size - 1, size - 1] = momentum
    return float(max(abs(np.linalg.eigvals(matrix))))


def largest_stable_step(momentum: float, delay: int, top: float = 10.0,
                        tolerance: float = 1e-4) -> float:
    """The largest a*h from 0 up that keeps the iteration stable (bisection on the first
    unstable step, found by a coarse scan)."""
    grid = np.linspace(tolerance, top, 4000)
    unstable = next((float(s) for s in grid if spectral_radius(s, momentum, delay) >= 1.0),
                    top)
    lo, hi = tolerance, unstable
    while hi - lo > tolerance:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if spectral_radius(mid, momentum, delay) < 1.0 else (lo, mid)
    return lo


def main() -> None:
    print("largest stable step x curvature (a*h) of heavy-ball SGD with a gradient d "
          "versions stale")
    print("momentum  " + "  ".join(f"d={d:<6}" for d in DELAYS) + "  d=1 vs d=0")
    for momentum in MOMENTA:
        steps = [largest_stable_step(momentum, d) for d in DELAYS]
        print(f"{momentum:<8}  " + "  ".join(f"{s:<8.3f}" for s in steps)
              + f"  1/{steps[0] / steps[1]:.0f}")
    print("the effective step a/(1-mu) at the largest stable a, d=1: "
          + ", ".join(f"mu={m}: {largest_stable_step(m, 1) / (1 - m):.2f}" for m in MOMENTA))


if __name__ == "__main__":
    main()
