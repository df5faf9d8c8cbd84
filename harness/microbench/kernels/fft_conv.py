"""Convolution by FFT (Mathieu et al. 2014; Vasilache et al. 2015, "Fast convolutional nets
with fbfft"): transform the padded input and the weights to the frequency domain, multiply and
sum over channels there (a complex GEMM per frequency), transform back. The FFT size is the
padded input rounded up to the next 7-smooth length (a size with a large prime factor, such as
226 = 2 x 113, transforms many times slower), so the transforms cost about the same for any
kernel size: the larger the kernel, the more direct-convolution work each FFT replaces.
Stride 1 only; fp32 (torch.fft has no bf16 on the CPU). Zero padding up to the FFT size
changes nothing below; each pass is exact up to rounding:

- forward: y = irfft(X . conj(W)), a circular correlation whose first out_h x out_w values
  wrap nothing;
- backward-data: dx = irfft(dY . W), the full convolution of dy with w, cropped by the padding;
- backward-weights: dw = irfft(sum_n X_n . conj(dY_n)), its first r x s values.
"""
from __future__ import annotations

import torch
from torch.nn import functional as F


def fast_length(n: int) -> int:
    """The smallest 7-smooth number (2^a 3^b 5^c 7^d) not below n."""
    length = n
    while True:
        rest = length
        for prime in (2, 3, 5, 7):
            while rest % prime == 0:
                rest //= prime
        if rest == 1:
            return length
        length += 1


def _padded(x: torch.Tensor, padding: tuple[int, int]) -> torch.Tensor:
    return F.pad(x, (padding[1], padding[1], padding[0], padding[0]))


def _fft_size(height: int, width: int) -> tuple[int, int]:
    return fast_length(height), fast_length(width)


def forward(x: torch.Tensor, weight: torch.Tensor, padding: tuple[int, int]) -> torch.Tensor:
    xp = _padded(x, padding)
    height, width = xp.shape[-2:]
    size = _fft_size(height, width)
    r, s = weight.shape[-2:]
    spectrum = torch.einsum("ncij,kcij->nkij", torch.fft.rfft2(xp, s=size),
                            torch.fft.rfft2(weight, s=size).conj())
    out = torch.fft.irfft2(spectrum, s=size)
    return out[..., : height - r + 1, : width - s + 1]


def backward_data(grad_out: torch.Tensor, weight: torch.Tensor, input_hw: tuple[int, int],
                  padding: tuple[int, int]) -> torch.Tensor:
    size = _fft_size(input_hw[0] + 2 * padding[0], input_hw[1] + 2 * padding[1])
    spectrum = torch.einsum("nkij,kcij->ncij", torch.fft.rfft2(grad_out, s=size),
                            torch.fft.rfft2(weight, s=size))
    out = torch.fft.irfft2(spectrum, s=size)
    return out[..., padding[0]: padding[0] + input_hw[0], padding[1]: padding[1] + input_hw[1]]


def backward_weights(x: torch.Tensor, grad_out: torch.Tensor, kernel_hw: tuple[int, int],
                     padding: tuple[int, int]) -> torch.Tensor:
    xp = _padded(x, padding)
    size = _fft_size(*xp.shape[-2:])
    spectrum = torch.einsum("ncij,nkij->kcij", torch.fft.rfft2(xp, s=size),
                            torch.fft.rfft2(grad_out, s=size).conj())
    out = torch.fft.irfft2(spectrum, s=size)
    return out[..., : kernel_hw[0], : kernel_hw[1]]
