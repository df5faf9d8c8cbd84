"""Analytic FLOPs and bytes of each kernel, arithmetic intensity, and the roofline.

FLOPs count 2 per multiply-add. A convolution's FLOPs are those of direct convolution,
2 * n * k * out_h * out_w * c * r * s, for every pass and every algorithm of the shape: FFT and
Winograd do fewer multiplications, so their *effective* FLOP/s (direct FLOPs / time) can pass
the GEMM peak. Bytes are the compulsory traffic: every operand read once and every result
written once at the precision's element size (caches that hold nothing between calls; the
im2col buffer, FFT spectra and Winograd tiles are an algorithm's own extra traffic, not
counted). Pointwise work (the LSTM gates, a bias) is left out of FLOPs, as
torch.utils.flop_counter leaves it out.
"""
from __future__ import annotations

from harness.microbench.kernels.shapes import (
    AttentionShape,
    ConvShape,
    GemmShape,
    LstmShape,
    MemoryShape,
    Shape,
)

ELEMENT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


def element_bytes(precision: str) -> int:
    return ELEMENT_BYTES[precision]


def conv_flops(shape: ConvShape) -> int:
    """Direct convolution's FLOPs; the same for forward, backward-data and backward-weights
    (each pairs every output element with every weight it touches once)."""
    return 2 * shape.n * shape.k * shape.out_h * shape.out_w * shape.c * shape.r * shape.s


def conv_bytes(shape: ConvShape, element: int) -> int:
    """Input, weights and output once: forward reads x and w and writes y, backward-data reads
    dy and w and writes dx, backward-weights reads x and dy and writes dw."""
    inputs = shape.n * shape.c * shape.h * shape.w
    weights = shape.k * shape.c * shape.r * shape.s
    outputs = shape.n * shape.k * shape.out_h * shape.out_w
    return (inputs + weights + outputs) * element


def gemm_flops(shape: GemmShape) -> int:
    return 2 * shape.m * shape.n * shape.k


def gemm_bytes(shape: GemmShape, element: int) -> int:
    """A (m x k) and B (k x n) read, C (m x n) written."""
    return (shape.m * shape.k + shape.k * shape.n + shape.m * shape.n) * element


def lstm_flops(shape: LstmShape, pass_: str) -> int:
    """Forward: the gate GEMMs x W_ih^T and h W_hh^T, 2 * b * (i + h) * 4h. Backward: twice
    that (the gradients of the inputs and of the weights, one GEMM each per weight)."""
    forward = 2 * shape.batch * (shape.input + shape.hidden) * 4 * shape.hidden
    return forward if pass_ == "fwd" else 2 * forward


def lstm_bytes(shape: LstmShape, pass_: str, element: int) -> int:
    """Forward reads x, h, c, both weight matrices and both biases and writes h', c'.
    Backward reads dh', dc', x, h, c, the weights and the four saved gate activations, and
    writes dx, dh, dc and the gradients of both weights and biases."""
    b, i, h = shape.batch, shape.input, shape.hidden
    weights = 4 * h * (i + h) + 2 * 4 * h
    if pass_ == "fwd":
        return (b * i + 2 * b * h + weights + 2 * b * h) * element
    reads = 2 * b * h + b * i + 2 * b * h + 4 * h * (i + h) + 4 * b * h
    writes = b * i + 2 * b * h + weights
    return (reads + writes) * element


def attention_flops(shape: AttentionShape, pass_: str) -> int:
    """Forward: QK^T and the weights times V, 2 · 2·B·H·T²·d over the full T x T scores (as
    torch.utils.flop_counter and PaLM's formula count them, for every backend: a causal kernel
    that skips the masked half shows a higher effective rate). Backward: twice that."""
    forward = 4 * shape.batch * shape.heads * shape.positions ** 2 * shape.head_dim
    return forward if pass_ == "fwd" else 2 * forward


def attention_bytes(shape: AttentionShape, pass_: str, element: int) -> int:
    """Forward reads q, k, v and writes the output; backward reads q, k, v, the output and
    its gradient and writes the gradients of q, k and v (the scores never leave a fused
    kernel; the math backend's own traffic of them is its extra)."""
    tensor = shape.batch * shape.heads * shape.positions * shape.head_dim
    return (4 if pass_ == "fwd" else 8) * tensor * element


def memory_flops(shape: MemoryShape, kernel: str, element: int) -> int:
    """copy: none; triad a = b + s * c: 2 per element (a multiply and an add, as STREAM)."""
    return 0 if kernel == "copy" else 2 * (shape.array_bytes // element)


def memory_bytes(shape: MemoryShape, kernel: str) -> int:
    """copy reads one array and writes one; triad reads two and writes one."""
    return (2 if kernel == "copy" else 3) * shape.array_bytes


def kernel_flops(shape: Shape, pass_: str, algorithm: str, precision: str) -> int:
    if isinstance(shape, ConvShape):
        return conv_flops(shape)
    if isinstance(shape, GemmShape):
        return gemm_flops(shape)
    if isinstance(shape, LstmShape):
        return lstm_flops(shape, pass_)
    if isinstance(shape, AttentionShape):
        return attention_flops(shape, pass_)
    return memory_flops(shape, algorithm, element_bytes(precision))


def kernel_bytes(shape: Shape, pass_: str, algorithm: str, precision: str) -> int:
    element = element_bytes(precision)
    if isinstance(shape, ConvShape):
        return conv_bytes(shape, element)
    if isinstance(shape, GemmShape):
        return gemm_bytes(shape, element)
    if isinstance(shape, LstmShape):
        return lstm_bytes(shape, pass_, element)
    if isinstance(shape, AttentionShape):
        return attention_bytes(shape, pass_, element)
    return memory_bytes(shape, algorithm)


def arithmetic_intensity(flops: float, nbytes: float) -> float:
    """FLOP per byte of compulsory traffic."""
    return flops / nbytes


def attainable_flops(intensity: float, peak_flops: float, bandwidth: float) -> float:
    """The roof over a kernel: min(peak, intensity x bandwidth)."""
    return min(peak_flops, intensity * bandwidth)


def bound(intensity: float, peak_flops: float, bandwidth: float) -> str:
    """Which roof is lower at this intensity: left of the ridge point (peak / bandwidth) the
    bandwidth roof, right of it the compute roof."""
    return "memory" if intensity * bandwidth < peak_flops else "compute"


def share_of_roof(flops: float, nbytes: float, seconds: float, peak_flops: float,
                  bandwidth: float) -> float:
    """Achieved rate over the roof at the kernel's intensity. As F / min(P, I x B) equals
    max(F / P, bytes/s / B), this form also holds for a kernel without FLOPs (copy)."""
    return max(flops / seconds / peak_flops, nbytes / seconds / bandwidth)
