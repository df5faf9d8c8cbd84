"""im2col, FFT, Winograd and NNPACK against direct convolution on small shapes, every pass,
at fp32 tolerance; and which algorithm applies where."""
from __future__ import annotations

import functools

import pytest
import torch

from harness.microbench.kernels.conv import ConvFamily
from harness.microbench.kernels.family import max_rel_error
from harness.microbench.kernels.shapes import CONV_PASSES, ConvShape

FP32_TOLERANCE = 1e-5
CPU = torch.device("cpu")
SHAPES = [
    ConvShape(2, 3, 9, 11, 4, 3, 3, (1, 1), (1, 1)),    # Winograd, odd output size
    ConvShape(2, 3, 10, 7, 4, 3, 3, (1, 1), (0, 0)),    # no padding
    ConvShape(2, 3, 10, 7, 5, 3, 3, (1, 1), (2, 1)),    # uneven padding
    ConvShape(2, 3, 12, 13, 4, 5, 5, (1, 1), (2, 2)),   # 5x5
    ConvShape(2, 3, 13, 12, 4, 5, 3, (1, 1), (0, 1)),   # rectangular kernel
    ConvShape(2, 3, 12, 13, 4, 3, 5, (2, 3), (1, 2)),   # strided, uneven stride
    ConvShape(16, 4, 10, 10, 6, 3, 3, (1, 1), (1, 1)),  # NNPACK's batch
]


@functools.cache
def _run(shape: ConvShape, pass_: str) -> dict[str, float]:
    """Max relative error of each applicable algorithm (computed once per shape and pass)."""
    family = ConvFamily()
    operands = family.operands(shape, pass_, "fp32", CPU, torch.Generator().manual_seed(1))
    reference = family.reference(operands, shape, pass_)
    errors = {}
    for algorithm in family.algorithms:
        if family.applies(algorithm, shape, pass_, "fp32", CPU) is None:
            result = family.build(algorithm, operands, shape, pass_)()
            assert result.shape == reference.shape
            errors[algorithm] = max_rel_error(result, reference)
    return errors


@pytest.mark.parametrize("pass_", CONV_PASSES)
@pytest.mark.parametrize("shape", SHAPES, ids=[s.label() for s in SHAPES])
def test_every_algorithm_matches_direct_convolution(shape: ConvShape, pass_: str) -> None:
    errors = _run(shape, pass_)
    assert {"direct", "im2col"} <= set(errors)
    assert all(error < FP32_TOLERANCE for error in errors.values()), errors


def test_each_algorithm_runs_where_it_applies() -> None:
    ran = {algorithm for shape in SHAPES for pass_ in CONV_PASSES
           for algorithm in _run(shape, pass_)}
    expected = {"direct", "im2col", "fft", "winograd"}
    if torch._nnpack_available():
        expected.add("nnpack")
    assert expected <= ran


def test_reference_is_torch_convolution() -> None:
    shape = SHAPES[0]
    family = ConvFamily()
    operands = family.operands(shape, "fwd", "fp32", CPU, torch.Generator().manual_seed(0))
    expected = torch.nn.functional.conv2d(operands["x"], operands["w"], padding=1)
    assert torch.equal(family.reference(operands, shape, "fwd"), expected)


def reason(algorithm: str, shape: ConvShape, pass_: str = "fwd",
           precision: str = "fp32") -> str | None:
    return ConvFamily().applies(algorithm, shape, pass_, precision, CPU)


def test_winograd_and_fft_say_when_they_do_not_apply() -> None:
    five = ConvShape(16, 4, 10, 10, 6, 5, 5, (1, 1), (2, 2))
    strided = ConvShape(16, 4, 11, 11, 6, 3, 3, (2, 2), (1, 1))
    assert "not applicable" in reason("winograd", five)
    assert "5x5" in reason("winograd", five)
    assert "stride 2x2" in reason("winograd", strided)
    assert "not applicable" in reason("fft", strided)
    assert reason("fft", five) is None
    assert "no bf16" in reason("fft", five, precision="bf16")
    assert reason("im2col", strided) is None and reason("direct", strided) is None


def test_nnpack_is_forward_only_and_needs_a_batch_of_16(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    shape = ConvShape(16, 4, 10, 10, 6, 3, 3, (1, 1), (1, 1))
    monkeypatch.setattr(torch, "_nnpack_available", lambda: True)
    assert "forward-only" in reason("nnpack", shape, "bwd_data")
    small = ConvShape(8, 4, 10, 10, 6, 3, 3, (1, 1), (1, 1))
    assert "not NNPACK" in reason("nnpack", small)
    assert "not NNPACK" in reason("nnpack", shape, precision="bf16")
    monkeypatch.setattr(torch, "_nnpack_available", lambda: False)
    assert reason("nnpack", shape).startswith("not available: torch._nnpack_available()")


def test_direct_convolution_reports_the_backend_torch_picked() -> None:
    shape = SHAPES[0]
    family = ConvFamily()
    operands = family.operands(shape, "fwd", "fp32", CPU, torch.Generator().manual_seed(0))
    details = family.details("direct", operands, shape, "fwd")
    assert details["layout"] == "channels_last"
    assert details["torch_conv_backend"] in ("Mkldnn", "Slow2d", "NnpackSpatial")


def test_fft_sizes_round_up_to_7_smooth_lengths() -> None:
    from harness.microbench.kernels.fft_conv import fast_length

    assert [fast_length(n) for n in (1, 64, 66, 74, 226)] == [1, 64, 70, 75, 240]
