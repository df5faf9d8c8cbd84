"""Convolution by FFT (Mathieu et al. 2014; Vasilache et al. 2015, "Fast convolutional nets
with fbfft"): transform the padded input and the weights to the frequency domain, multiply and
sum over channels there (a complex GEMM per frequency), transform back. The FFT size is the
padded input, so the transforms cost the same for any kernel size: the larger the kernel, the
more direct-convolution work each FFT replaces. Stride 1 only; fp32 (torch.fft has no bf16
on the CPU). Each pass is exact up to rounding:

- forward: y = irfft(X . conj(W)), a circular correlation whose first out_h x out_w values
  wrap nothing;
- backward-data: dx = irfft(dY . W), the full convolution of dy with w, cropped by the padding;
- backward-weights: dw = irfft(sum_n X_n . conj(dY_n)), its first r x s values.
"""
from __future__ import annotations

import torch
from torch.nn import functional as F


def _padded(x: torch.Tensor, padding: tuple[int, int]) -> torch.Tensor:
    return F.pad(x, (padding[1], padding[1], padding[0], padding[0]))


def forward(x: torch.Tensor, weight: torch.Tensor, padding: tuple[int, int]) -> torch.Tensor:
    xp = _padded(x, padding)
    size = xp.shape[-2:]
    r, s = weight.shape[-2:]
    spectrum = torch.einsum("ncij,kcij->nkij", torch.fft.rfft2(xp),
                            torch.fft.rfft2(weight, s=size).conj())
    out = torch.fft.irfft2(spectrum, s=size)
    return out[..., : size[0] - r + 1, : size[1] - s + 1]


def backward_data(grad_out: torch.Tensor, weight: torch.Tensor, input_hw: tuple[int, int],
                  padding: tuple[int, int]) -> torch.Tensor:
    size = (input_hw[0] + 2 * padding[0], input_hw[1] + 2 * padding[1])
    spectrum = torch.einsum("nkij,kcij->ncij", torch.fft.rfft2(grad_out, s=size),
                            torch.fft.rfft2(weight, s=size))
    out = torch.fft.irfft2(spectrum, s=size)
    return out[..., padding[0]: padding[0] + input_hw[0], padding[1]: padding[1] + input_hw[1]]


def backward_weights(x: torch.Tensor, grad_out: torch.Tensor, kernel_hw: tuple[int, int],
                     padding: tuple[int, int]) -> torch.Tensor:
    xp = _padded(x, padding)
    size = xp.shape[-2:]
    spectrum = torch.einsum("ncij,nkij->kcij", torch.fft.rfft2(xp),
                            torch.fft.rfft2(grad_out, s=size).conj())
    out = torch.fft.irfft2(spectrum, s=size)
    return out[..., : kernel_hw[0], : kernel_hw[1]]
