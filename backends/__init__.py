"""Compute backends, communication backends and launchers; importing registers them all."""
from __future__ import annotations

from backends import comm, cpu, launchers  # noqa: F401  (registration)
from backends.base import COMM_BACKENDS, COMPUTE_BACKENDS, LAUNCHERS, Availability

try:
    from backends import cuda  # noqa: F401
except ImportError:  # pragma: no cover - cuda.py is plain Python and imports without a GPU
    pass

REGISTRIES = {"backend": COMPUTE_BACKENDS, "comm": COMM_BACKENDS, "launcher": LAUNCHERS}


def first_unavailable(choices: list[tuple[str, str]]) -> str | None:
    """The reason the first unavailable (axis, name) choice cannot run here, or None."""
    for kind, name in choices:
        availability = REGISTRIES[kind].get(name).availability()
        if not availability.available:
            return f"{kind} {name}: {availability.reason}"
    return None


__all__ = ["COMM_BACKENDS", "COMPUTE_BACKENDS", "LAUNCHERS", "Availability", "first_unavailable"]
