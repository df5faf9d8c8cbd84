"""Convolution by algorithm: torch's own path (oneDNN direct convolution on the CPU, cuDNN on
CUDA), im2col + GEMM, FFT and Winograd F(2x2, 3x3) written with torch tensor operations, and
torch's NNPACK path where the build has it. Every result is checked against direct
convolution in fp32 on the same (rounded) operands."""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.nn import functional as F

from harness.microbench.kernels import fft_conv, im2col, winograd
from harness.microbench.kernels.family import (
    DTYPES,
    FAMILIES,
    KernelFamily,
    Operands,
    random_tensor,
)
from harness.microbench.kernels.shapes import ConvShape, Shape

NNPACK_FORWARD_ONLY = ("not applicable: torch's NNPACK path is forward-only (with oneDNN off, "
                       "its backward runs slow_conv_dilated2d)")


@contextlib.contextmanager
def onednn_disabled() -> Iterator[None]:
    """torch.backends.mkldnn off for the duration (its `flags` helper warns about TF32)."""
    saved = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = False
    try:
        yield
    finally:
        torch.backends.mkldnn.enabled = saved


def torch_conv_backend(shape: ConvShape, dtype: torch.dtype, device: torch.device, *,
                       channels_last: bool = False, onednn: bool = True) -> str:
    """The backend torch's convolution dispatch picks for such operands
    (torch._C._select_conv_backend): Mkldnn, NnpackSpatial, Slow2d, Cudnn, ... The tensors it
    is shown are uninitialised: the dispatch reads shapes, strides and types, never the data,
    so their pages are never touched."""
    layout = torch.channels_last if channels_last else torch.contiguous_format
    x = torch.empty((shape.n, shape.c, shape.h, shape.w), dtype=dtype, device=device,
                    memory_format=layout)
    weight = torch.empty((shape.k, shape.c, shape.r, shape.s), dtype=dtype, device=device,
                         memory_format=layout)
    with contextlib.nullcontext() if onednn else onednn_disabled():
        chosen = torch._C._select_conv_backend(x, weight, None, list(shape.stride),
                                               list(shape.padding), [1, 1], False, [0, 0], 1)
    return str(chosen).rsplit(".", 1)[-1]


def direct_backward(grad_out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                    shape: ConvShape, pass_: str) -> torch.Tensor:
    """torch's convolution backward for one gradient (what autograd calls)."""
    mask = (pass_ == "bwd_data", pass_ == "bwd_weights", False)
    grads = torch.ops.aten.convolution_backward(
        grad_out, x, weight, None, list(shape.stride), list(shape.padding), [1, 1], False,
        [0, 0], 1, list(mask))
    return grads[0] if pass_ == "bwd_data" else grads[1]


def direct(operands: Operands, shape: ConvShape, pass_: str) -> torch.Tensor:
    x, weight = operands["x"], operands["w"]
    if pass_ == "fwd":
        return F.conv2d(x, weight, stride=shape.stride, padding=shape.padding)
    return direct_backward(operands["dy"], x, weight, shape, pass_)


@FAMILIES.register("conv")
class ConvFamily(KernelFamily):
    """Each pass of a convolution by five algorithms (fft and winograd where they apply)."""

    name = "conv"
    algorithms = ("direct", "im2col", "fft", "winograd", "nnpack")

    def applies(self, algorithm: str, shape: Shape, pass_: str, precision: str,
                device: torch.device) -> str | None:
        assert isinstance(shape, ConvShape)
        unit_stride = shape.stride == (1, 1)
        if algorithm == "fft":
            if not unit_stride:
                return (f"not applicable: FFT convolution is for stride 1 (stride "
                        f"{shape.stride[0]}x{shape.stride[1]} would compute every output and "
                        "keep a fraction)")
            if precision != "fp32":
                return f"not applicable: torch.fft has no {precision}; FFT runs in fp32 only"
        if algorithm == "winograd" and not (unit_stride and (shape.r, shape.s) == (3, 3)
                                            and max(shape.padding) <= 2):
            return (f"not applicable: Winograd F(2x2,3x3) needs a 3x3 kernel at stride 1 "
                    f"(this is {shape.r}x{shape.s} at stride {shape.stride[0]}x{shape.stride[1]})")
        if algorithm == "nnpack":
            return self._nnpack_reason(shape, pass_, precision, device)
        return None

    @staticmethod
    def _nnpack_reason(shape: ConvShape, pass_: str, precision: str,
                       device: torch.device) -> str | None:
        if device.type != "cpu":
            return "not applicable: NNPACK is a CPU library"
        if not torch._nnpack_available():
            return ("not available: torch._nnpack_available() is False (torch built without "
                    "NNPACK, or NNPACK does not support this CPU)")
        if pass_ != "fwd":
            return NNPACK_FORWARD_ONLY
        chosen = torch_conv_backend(shape, DTYPES[precision], device, onednn=False)
        if chosen != "NnpackSpatial":
            return (f"not applicable: with oneDNN off torch picks {chosen}, not NNPACK "
                    "(NNPACK needs fp32, batch >= 16, kernel <= 16 and padding < kernel)")
        return None

    def operands(self, shape: Shape, pass_: str, precision: str, device: torch.device,
                 generator: torch.Generator) -> Operands:
        assert isinstance(shape, ConvShape)
        operands = {"x": random_tensor((shape.n, shape.c, shape.h, shape.w), precision, device,
                                       generator),
                    "w": random_tensor((shape.k, shape.c, shape.r, shape.s), precision, device,
                                       generator)}
        if pass_ != "fwd":
            operands["dy"] = random_tensor((shape.n, shape.k, shape.out_h, shape.out_w),
                                           precision, device, generator)
        return operands

    def reference(self, operands: Operands, shape: Shape, pass_: str) -> torch.Tensor:
        assert isinstance(shape, ConvShape)
        return direct({name: t.float() for name, t in operands.items()}, shape, pass_)

    def build(self, algorithm: str, operands: Operands, shape: Shape,
              pass_: str) -> Callable[[], Any]:
        assert isinstance(shape, ConvShape)
        implementation = IMPLEMENTATIONS[algorithm][pass_]
        if algorithm == "direct":
            # As the image workloads train: oneDNN on channels_last (NHWC) tensors. On
            # contiguous NCHW tensors it reorders every call (a 1x1 layer ran 3.7x slower).
            operands = {name: tensor.contiguous(memory_format=torch.channels_last)
                        for name, tensor in operands.items()}
        return lambda: implementation(operands, shape)

    def details(self, algorithm: str, operands: Operands, shape: Shape,
                pass_: str) -> dict[str, Any]:
        assert isinstance(shape, ConvShape)
        dtype, device = operands["x"].dtype, operands["x"].device
        if algorithm == "direct":
            return {"layout": "channels_last", "torch_conv_backend": torch_conv_backend(
                shape, dtype, device, channels_last=True)}
        if algorithm == "nnpack":
            return {"layout": "contiguous", "torch_conv_backend": torch_conv_backend(
                shape, dtype, device, onednn=False)}
        return {"layout": "contiguous"}


def _nnpack(operands: Operands, shape: ConvShape) -> torch.Tensor:
    with onednn_disabled():
        return direct(operands, shape, "fwd")


ConvCall = Callable[[Operands, ConvShape], torch.Tensor]
# algorithm -> pass -> implementation
IMPLEMENTATIONS: dict[str, dict[str, ConvCall]] = {
    "direct": {p: (lambda o, s, p=p: direct(o, s, p)) for p in ("fwd", "bwd_data", "bwd_weights")},
    "im2col": {
        "fwd": lambda o, s: im2col.forward(o["x"], o["w"], s.stride, s.padding),
        "bwd_data": lambda o, s: im2col.backward_data(o["dy"], o["w"], (s.h, s.w), s.stride,
                                                      s.padding),
        "bwd_weights": lambda o, s: im2col.backward_weights(o["x"], o["dy"], (s.r, s.s),
                                                            s.stride, s.padding)},
    "fft": {
        "fwd": lambda o, s: fft_conv.forward(o["x"], o["w"], s.padding),
        "bwd_data": lambda o, s: fft_conv.backward_data(o["dy"], o["w"], (s.h, s.w), s.padding),
        "bwd_weights": lambda o, s: fft_conv.backward_weights(o["x"], o["dy"], (s.r, s.s),
                                                              s.padding)},
    "winograd": {
        "fwd": lambda o, s: winograd.forward(o["x"], o["w"], s.padding),
        "bwd_data": lambda o, s: winograd.backward_data(o["dy"], o["w"], s.padding),
        "bwd_weights": lambda o, s: winograd.backward_weights(o["x"], o["dy"], s.padding)},
    "nnpack": {"fwd": _nnpack},
}
