"""Named registries: registration, lookup, and errors that list the known names."""
from __future__ import annotations

import pytest

from harness.core.errors import UnknownNameError, UsageError
from harness.core.registry import Registry


def test_register_returns_the_entry_and_get_finds_it() -> None:
    widgets: Registry[type] = Registry("widget")

    @widgets.register("spanner")
    class Spanner:
        pass

    assert widgets.get("spanner") is Spanner
    assert "spanner" in widgets and "hammer" not in widgets
    assert widgets.names() == ["spanner"]


def test_names_keep_registration_order() -> None:
    widgets: Registry[int] = Registry("widget")
    for index, name in enumerate(("zeta", "alpha", "mid")):
        widgets.register(name)(index)
    assert widgets.names() == ["zeta", "alpha", "mid"]
    assert list(widgets) == ["zeta", "alpha", "mid"]


def test_duplicate_registration_is_an_error_and_keeps_the_first() -> None:
    widgets: Registry[str] = Registry("widget")
    widgets.register("spanner")("first")
    with pytest.raises(ValueError, match="widget 'spanner' is registered twice"):
        widgets.register("spanner")("second")
    assert widgets.get("spanner") == "first"


def test_unknown_name_lists_known_names_and_is_a_usage_error() -> None:
    widgets: Registry[str] = Registry("widget")
    widgets.register("spanner")("s")
    widgets.register("hammer")("h")
    with pytest.raises(UnknownNameError) as caught:
        widgets.get("saw")
    assert isinstance(caught.value, UsageError)
    message = str(caught.value)
    assert "unknown widget 'saw'" in message
    assert "spanner, hammer" in message


def test_built_in_registries_hold_what_the_spec_names() -> None:
    from backends import COMM_BACKENDS, COMPUTE_BACKENDS, LAUNCHERS
    from harness.collectors import COLLECTORS
    from workloads import WORKLOADS

    assert sorted(WORKLOADS) == ["alexnet", "gpt", "hep_cnn", "lstm", "resnet50"]
    assert {"cpu", "cuda"} <= set(COMPUTE_BACKENDS)
    assert set(COMM_BACKENDS) == {"none", "gloo", "mpi", "nccl"}
    assert set(LAUNCHERS) == {"local", "torchrun", "mpirun", "slurm"}
    stage = {name: COLLECTORS.get(name).stage for name in COLLECTORS}
    # Evaluation order: throughput before the flops collector that reads it, and so on.
    assert stage["throughput"] < stage["flops"] < stage["mfu"]
