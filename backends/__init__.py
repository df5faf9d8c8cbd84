"""Compute backends, communication backends and launchers; importing registers them all."""
from __future__ import annotations

from backends import comm, cpu, launchers  # noqa: F401  (registration)
from backends.base import COMM_BACKENDS, COMPUTE_BACKENDS, LAUNCHERS, Availability

try:
    from backends import cuda  # noqa: F401
except ImportError:  # pragma: no cover - cuda.py is plain Python and imports without a GPU
    pass

__all__ = ["COMM_BACKENDS", "COMPUTE_BACKENDS", "LAUNCHERS", "Availability"]
