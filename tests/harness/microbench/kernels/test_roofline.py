"""FLOP and byte formulas against values worked out by hand, and the roofline arithmetic."""
from __future__ import annotations

import pytest

from harness.microbench.kernels import roofline
from harness.microbench.kernels.shapes import ConvShape, GemmShape, LstmShape, MemoryShape


def test_convolution_flops_and_bytes_by_hand() -> None:
    # 2 images of 3 x 5 x 5, 4 filters of 3 x 3, stride 1, padding 1: output 2 x 4 x 5 x 5.
    shape = ConvShape(2, 3, 5, 5, 4, 3, 3, (1, 1), (1, 1))
    assert (shape.out_h, shape.out_w) == (5, 5)
    # 2 FLOPs x 200 outputs x 27 multiply-adds each.
    assert roofline.conv_flops(shape) == 2 * 200 * 27 == 10_800
    # x: 150, w: 108, y: 200 elements, 4 bytes each in fp32, 2 in bf16.
    assert roofline.conv_bytes(shape, 4) == 458 * 4 == 1832
    assert roofline.kernel_bytes(shape, "bwd_weights", "fft", "bf16") == 916
    for pass_ in ("fwd", "bwd_data", "bwd_weights"):
        for algorithm in ("direct", "im2col", "fft", "winograd"):
            assert roofline.kernel_flops(shape, pass_, algorithm, "fp32") == 10_800


def test_strided_rectangular_convolution_by_hand() -> None:
    # DeepSpeech's first layer: 161 x 700 input, 5 x 20 filter, stride 2, no padding.
    shape = ConvShape(16, 1, 161, 700, 32, 5, 20, (2, 2), (0, 0))
    assert (shape.out_h, shape.out_w) == (79, 341)
    assert roofline.conv_flops(shape) == 2 * 16 * 32 * 79 * 341 * 1 * 5 * 20 == 2_758_553_600
    assert shape.label() == "16x1x161x700 k32 5x20 s2 p0"


def test_gemm_flops_and_bytes_by_hand() -> None:
    shape = GemmShape(64, 32, 48, True, False)
    assert roofline.gemm_flops(shape) == 196_608
    # A 64x48 (3072), B 48x32 (1536), C 64x32 (2048) elements.
    assert roofline.gemm_bytes(shape, 4) == 6656 * 4
    assert shape.label() == "64x32x48 TN"
    intensity = roofline.arithmetic_intensity(196_608, 26_624)
    assert intensity == pytest.approx(7.3846, rel=1e-4)


def test_lstm_cell_flops_and_bytes_by_hand() -> None:
    shape = LstmShape(batch=2, input=3, hidden=4)
    # Gate GEMMs: 2 x 2 x (3 + 4) x 16 = 448 forward, twice that backward.
    assert roofline.lstm_flops(shape, "fwd") == 448
    assert roofline.lstm_flops(shape, "bwd") == 896
    # Forward: x 6, h 8, c 8, W_ih 48, W_hh 64, biases 32 read; h', c' 16 written: 182.
    assert roofline.lstm_bytes(shape, "fwd", 4) == 182 * 4
    # Backward reads dh', dc' 16, x 6, h, c 16, weights 112, gates 32 (182);
    # writes dx 6, dh, dc 16, weight and bias gradients 144 (166).
    assert roofline.lstm_bytes(shape, "bwd", 4) == 348 * 4


def test_causal_attention_flops_and_bytes_by_hand() -> None:
    from harness.microbench.kernels.shapes import AttentionShape

    shape = AttentionShape(2, 3, 16, 8)  # 2 sequences, 3 heads, 16 tokens, 8 per head
    assert roofline.attention_flops(shape, "fwd") == 2 * 2 * 2 * 3 * 16 * 16 * 8
    assert roofline.attention_flops(shape, "bwd") == 2 * roofline.attention_flops(shape, "fwd")
    assert roofline.attention_bytes(shape, "fwd", 2) == 4 * 2 * 3 * 16 * 8 * 2
    assert roofline.attention_bytes(shape, "bwd", 4) == 8 * 2 * 3 * 16 * 8 * 4


def test_stream_kernels_by_hand() -> None:
    shape = MemoryShape(4096)
    assert roofline.memory_flops(shape, "copy", 4) == 0
    assert roofline.memory_bytes(shape, "copy") == 8192
    assert roofline.memory_flops(shape, "triad", 4) == 2048
    assert roofline.memory_bytes(shape, "triad") == 12_288
    assert roofline.memory_flops(shape, "triad", 2) == 4096


def test_roofline_arithmetic() -> None:
    peak, bandwidth = 100e9, 10e9  # ridge point at 10 FLOP/B
    assert roofline.attainable_flops(2.0, peak, bandwidth) == 20e9
    assert roofline.attainable_flops(50.0, peak, bandwidth) == 100e9
    assert roofline.bound(2.0, peak, bandwidth) == "memory"
    assert roofline.bound(10.0, peak, bandwidth) == "compute"
    # 2e9 FLOP and 1e8 bytes (20 FLOP/B) in 0.04 s: 50 GFLOP/s of a 100 GFLOP/s roof.
    assert roofline.share_of_roof(2e9, 1e8, 0.04, peak, bandwidth) == pytest.approx(0.5)
    # 1e9 FLOP, 5e8 bytes (2 FLOP/B) in 0.1 s: 10 of a 20 GFLOP/s roof = 5 of 10 GB/s.
    assert roofline.share_of_roof(1e9, 5e8, 0.1, peak, bandwidth) == pytest.approx(0.5)
    # copy: no FLOPs, 8e8 bytes in 0.1 s is 8 of 10 GB/s.
    assert roofline.share_of_roof(0, 8e8, 0.1, peak, bandwidth) == pytest.approx(0.8)
