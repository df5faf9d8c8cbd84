"""Convolution as im2col + GEMM (Chellapilla et al. 2006; Caffe's layout): unfold every
receptive field into a column, then one matrix product per pass. Any stride and padding."""
from __future__ import annotations

import torch
from torch.nn import functional as F


def _out_hw(h: int, w: int, r: int, s: int, stride: tuple[int, int],
            padding: tuple[int, int]) -> tuple[int, int]:
    return ((h + 2 * padding[0] - r) // stride[0] + 1, (w + 2 * padding[1] - s) // stride[1] + 1)


def forward(x: torch.Tensor, weight: torch.Tensor, stride: tuple[int, int],
            padding: tuple[int, int]) -> torch.Tensor:
    """y = W (k x c*r*s) . cols (c*r*s x out_h*out_w), per sample."""
    n, _, h, w = x.shape
    k, _, r, s = weight.shape
    cols = F.unfold(x, (r, s), padding=padding, stride=stride)
    out = torch.matmul(weight.reshape(k, -1), cols)
    return out.reshape(n, k, *_out_hw(h, w, r, s, stride, padding))


def backward_data(grad_out: torch.Tensor, weight: torch.Tensor, input_hw: tuple[int, int],
                  stride: tuple[int, int], padding: tuple[int, int]) -> torch.Tensor:
    """dcols = W^T . dy per sample, then col2im (fold) sums the overlapping fields into dx."""
    n, k = grad_out.shape[:2]
    _, _, r, s = weight.shape
    dcols = torch.matmul(weight.reshape(k, -1).t(), grad_out.reshape(n, k, -1))
    return F.fold(dcols, input_hw, (r, s), padding=padding, stride=stride)


def backward_weights(x: torch.Tensor, grad_out: torch.Tensor, kernel_hw: tuple[int, int],
                     stride: tuple[int, int], padding: tuple[int, int]) -> torch.Tensor:
    """dW = sum over samples of dy (k x out_h*out_w) . cols^T: one batched GEMM and a sum."""
    n, c = x.shape[:2]
    k = grad_out.shape[1]
    cols = F.unfold(x, kernel_hw, padding=padding, stride=stride)
    per_sample = torch.bmm(grad_out.reshape(n, k, -1), cols.transpose(1, 2))
    return per_sample.sum(0).reshape(k, c, *kernel_hw)
