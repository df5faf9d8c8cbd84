"""A small set run for real: one record per kernel, pass and algorithm, valid schema-v1
records, metrics derived from the raw samples, not-applicable algorithms skipped."""
from __future__ import annotations

import dataclasses
import datetime as dt

import pytest
import torch

from harness.microbench.kernels.records import kernel_record
from harness.microbench.kernels.roofline import kernel_bytes, kernel_flops
from harness.microbench.kernels.runner import KernelRunner, planned_steps
from harness.microbench.kernels.sets import get_set
from harness.records.record import check_record, metric
from harness.spec.kinds import KERNEL

FINGERPRINT = {"harness": {"version": "test"}, "machine": {"cpu_model": "test"},
               "software": {"torch": torch.__version__}}


@pytest.fixture(scope="module")
def records() -> list[dict]:
    tiny = get_set("tiny")
    small = dataclasses.replace(
        tiny, build=lambda: [c for c in tiny.build()
                             if c.family in ("conv", "lstm", "attention")][1:])
    saved = torch.get_num_threads()
    steps = []
    try:
        runner = KernelRunner(small, "fp32", "cpu", 1,
                              lambda step, measured: steps.append((step.index, measured)))
        made = [kernel_record(m, runner.roofs, run_id=f"t-{i:03d}",
                              created=dt.datetime(2024, 1, 1, tzinfo=dt.UTC), kernel_set=small,
                              backend="cpu", threads=runner.threads, **FINGERPRINT)
                for i, m in enumerate(runner.run())]
    finally:
        torch.set_num_threads(saved)
    # Each step starts (None) and ends (its measurement) before the next starts.
    assert [index for index, _ in steps] == [i for i in range(1, runner.total + 1)
                                             for _ in range(2)]
    assert all((measured is None) == (n % 2 == 0) for n, (_, measured) in enumerate(steps))
    assert len(made) == runner.total == planned_steps(small.cases())
    return made


def test_records_are_valid_and_one_per_kernel_pass_and_algorithm(records: list[dict]) -> None:
    for record in records:
        check_record(record)
    identities = [(r["spec"]["kernel"], r["spec"]["pass"], r["spec"]["algorithm"])
                  for r in records]
    assert len(identities) == len(set(identities))
    keys = [r["spec_key"] for r in records]
    assert len(keys) == len(set(keys))
    assert all(r["spec"]["task"] == "kernel" and r["spec"]["set"] == "tiny" for r in records)


def test_not_applicable_algorithms_are_skipped_with_the_reason(records: list[dict]) -> None:
    skipped = {(r["spec"]["kernel"], r["spec"]["pass"], r["spec"]["algorithm"]): r["error"]
               for r in records if r["status"] == "skipped"}
    assert "Winograd F(2x2,3x3) needs a 3x3 kernel" in skipped[
        ("16x4x10x10 k6 5x5 s1 p2", "fwd", "winograd")]
    assert "stride 1" in skipped[("16x4x11x11 k6 3x3 s2 p1", "bwd_data", "fft")]
    assert all(r["status"] != "failed" for r in records)
    assert all(not r["metrics"] for r in records if r["status"] == "skipped")


def test_attention_runs_each_sdpa_backend_this_device_has(records: list[dict]) -> None:
    """On the CPU SDPA has math and flash attention; memory-efficient and cuDNN attention
    are skipped with SDPA's own reason. What runs matches the fp32 math reference."""
    found = {(r["spec"]["pass"], r["spec"]["algorithm"]): r for r in records
             if r["spec"]["family"] == "attention"}
    assert len(found) == 2 * 4
    for pass_ in ("fwd", "bwd"):
        for algorithm in ("math", "flash_attention"):
            ran = found[(pass_, algorithm)]
            assert ran["status"] == "success", ran["error"]
            assert metric(ran, "max_rel_error")["value"] < 1e-5
        for algorithm in ("efficient_attention", "cudnn_attention"):
            skipped = found[(pass_, algorithm)]
            assert skipped["status"] == "skipped" and "does not run here" in skipped["error"]


def test_metrics_follow_from_the_samples_and_the_formulas(records: list[dict]) -> None:
    conv = next(r for r in records if r["spec"]["algorithm"] == "im2col"
                and r["spec"]["pass"] == "bwd_data" and r["status"] == "success")
    from harness.microbench.kernels.shapes import ConvShape

    shape = ConvShape(**{**conv["spec"]["shape"],
                         "stride": tuple(conv["spec"]["shape"]["stride"]),
                         "padding": tuple(conv["spec"]["shape"]["padding"])})
    flops = kernel_flops(shape, "bwd_data", "im2col", "fp32")
    nbytes = kernel_bytes(shape, "bwd_data", "im2col", "fp32")
    times = metric(conv, "time")["samples"]
    assert len(times) >= 3
    assert metric(conv, "effective_flops")["samples"] == pytest.approx([flops / t for t in times])
    assert metric(conv, "kernel_flops")["value"] == flops
    assert metric(conv, "kernel_bytes")["value"] == nbytes
    assert metric(conv, "arithmetic_intensity")["value"] == pytest.approx(flops / nbytes)
    peak = metric(conv, "peak_flops")["value"]
    bandwidth = metric(conv, "memory_bandwidth")["value"]
    median = metric(conv, "time")["value"]
    assert metric(conv, "attainable_flops")["value"] == pytest.approx(
        min(peak, flops / nbytes * bandwidth))
    assert metric(conv, "share_of_roof")["value"] == pytest.approx(
        max(flops / median / peak, nbytes / median / bandwidth))
    assert metric(conv, "max_rel_error")["value"] < 1e-5


def test_roofs_come_from_the_run_itself(records: list[dict]) -> None:
    copy, triad = records[0], records[1]
    assert (copy["spec"]["algorithm"], triad["spec"]["algorithm"]) == ("copy", "triad")
    best = max(metric(r, "achieved_bandwidth")["value"] for r in (copy, triad))
    assert all(metric(r, "memory_bandwidth")["value"] == best
               for r in records if r["status"] == "success")
    peak = metric(copy, "peak_flops")
    assert peak["peak_source"] == "in-run" and peak["value"] == max(peak["per_size"].values())


def test_spec_key_covers_the_identity_only(records: list[dict]) -> None:
    spec = dict(records[2]["spec"])
    assert KERNEL.key(spec) == records[2]["spec_key"]
    assert KERNEL.key({**spec, "set": "full", "sources": ["x"], "budget_s": 9}) == \
        records[2]["spec_key"]
    assert KERNEL.key({**spec, "threads": 7}) != records[2]["spec_key"]
