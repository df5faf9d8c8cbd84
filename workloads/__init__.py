"""Standardized training workloads; importing this package registers all of them."""
from __future__ import annotations

from workloads import alexnet, gpt, hep_cnn, lstm, resnet50  # noqa: F401  (registration)
from workloads.base import WORKLOADS, Workload, get_workload

__all__ = ["WORKLOADS", "Workload", "get_workload"]
