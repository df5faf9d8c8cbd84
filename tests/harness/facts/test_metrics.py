"""The metric catalogue: one entry per metric, families by prefix, scales and roles (that every
writer takes its metrics from it: tests/harness/collectors/test_catalogue.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

from harness.facts.metrics import (
    AS_STORED,
    BINARY,
    CATALOGUE,
    CONSTANT,
    DIAGNOSTIC,
    GATED,
    HIGHER,
    LOWER,
    PERCENT,
    STEP_TIME,
    TIME,
    VALUE,
    compare_role,
    higher_is_better,
    metric_info,
    scale_of,
)

HARNESS = Path(__file__).resolve().parents[3] / "harness"


def test_each_metric_is_declared_once_with_known_values() -> None:
    names = [info.name for info in CATALOGUE]
    assert len(names) == len(set(names))
    for info in CATALOGUE:
        assert info.better in (HIGHER, LOWER, None), info.name
        assert info.compare in (GATED, VALUE, DIAGNOSTIC, CONSTANT), info.name
        assert info.family == info.name.endswith("_"), info.name
        assert info.definition and "\n" not in info.definition, info.name
        assert info.scale is not None or info.unit is None, info.name  # else by the unit


def test_a_family_answers_for_its_members_and_an_exact_name_comes_first() -> None:
    assert metric_info("phase_forward").name == "phase_"  # type: ignore[union-attr]
    assert metric_info("comm_bytes_gradient").name == "comm_bytes_"  # type: ignore[union-attr]
    assert metric_info("comm_bytes_outside_steps").name == "comm_bytes_outside_steps"  # type: ignore[union-attr]  # noqa: E501
    assert metric_info("comm_bytes").name == "comm_bytes"  # type: ignore[union-attr]
    doctor = metric_info("doctor_gemm_fp32")
    assert doctor is not None and doctor.unit is None and doctor.higher_is_better is None


def test_an_unknown_metric_is_gated_and_scaled_by_its_unit() -> None:
    assert metric_info("foreign_metric") is None
    assert higher_is_better("foreign_metric") is None
    assert compare_role("foreign_metric") == GATED
    assert scale_of("foreign_metric", "1") == PERCENT
    assert scale_of("foreign_metric", "bytes") == BINARY
    assert scale_of("foreign_metric", "widgets") == AS_STORED


def test_compare_roles_are_the_ones_compare_used_to_list() -> None:
    assert {n for n in ("peak_memory", "time_to_train", "energy_per_sample")
            if compare_role(n) == VALUE} == {"peak_memory", "time_to_train", "energy_per_sample"}
    for name in ("achieved_flops", "mfu", "mfu_spec", "data_wait", "data_wait_share", "energy",
                 "power", "phase_backward"):
        assert compare_role(name) == DIAGNOSTIC, name
    for name in ("flops_per_sample", "peak_flops", "memory_bandwidth", "kernel_flops",
                 "share_of_roof", "grad_bytes_per_step"):
        assert compare_role(name) == CONSTANT, name
    assert compare_role("throughput") == compare_role("step_time") == GATED


def test_a_declared_scale_holds_only_for_the_catalogues_unit() -> None:
    assert scale_of("step_time", "s") == STEP_TIME
    assert scale_of("step_time", "ms") == AS_STORED  # a foreign record's own unit
    assert scale_of("quality", "1") == AS_STORED  # accuracy is not shown as a percentage
    assert scale_of("mfu", "1") == PERCENT
    assert scale_of("bubble_fraction", "ratio") == AS_STORED  # records before unit 1
    assert scale_of("latency", "s") == TIME


@pytest.mark.parametrize("name", [info.name for info in CATALOGUE if not info.family])
def test_every_exact_name_finds_itself(name: str) -> None:
    assert metric_info(name).name == name  # type: ignore[union-attr]


def test_every_metric_has_a_heading_in_words() -> None:
    """Tables read headings from the catalogue: words, never the raw name; a family's
    heading takes its member's suffix."""
    from harness.facts.metrics import heading_of

    for info in CATALOGUE:
        assert info.heading and "_" not in info.heading, info.name
        assert ("{}" in info.heading) == info.family, info.name
    assert heading_of("first_step_time") == "first step"
    assert heading_of("comm_payload_bytes") == "collective payload/step"
    assert heading_of("tokens_per_s") == "token throughput"
    assert heading_of("comm_bytes_gradient") == "gradient bytes/step"
    assert heading_of("phase_backward") == "backward phase"
    assert heading_of("foreign_metric") == "foreign metric"


def test_the_training_table_shows_what_the_catalogue_marks_in_its_order() -> None:
    from harness.facts.metrics import column_metrics

    recorded = ["peak_memory", "phase_forward", "throughput", "flops_per_sample", "mfu",
                "first_step_time", "comm_bytes_gradient", "state_bytes", "foreign_metric",
                "tokens_per_s", "time_breakdown"]
    assert column_metrics(recorded) == ["throughput", "tokens_per_s", "first_step_time", "mfu",
                                        "peak_memory"]


def test_the_index_keeps_its_columns_where_stores_have_them() -> None:
    """The index's metric columns, in the order stores on disk and servers were made with;
    their units and directions are the catalogue's (records/summary.py restates none)."""
    from harness.facts.metrics import indexed_metrics
    from harness.records.summary import METRIC_COLUMNS

    assert METRIC_COLUMNS == ("m_throughput", "m_step_time", "m_mfu", "m_peak_memory",
                              "m_time_to_train", "m_achieved_flops", "m_scaling_efficiency")
    assert [info.index for info in indexed_metrics()] == list(range(1, 8))
