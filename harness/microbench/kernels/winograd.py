"""Winograd's minimal filtering F(2x2, 3x3) (Lavin and Gray 2016, "Fast Algorithms for
Convolutional Neural Networks"): each 4x4 input tile d and 3x3 filter g give a 2x2 output
Y = A^T [(G g G^T) . (B^T d B)] A with 16 multiplications instead of 36; the sum over input
channels of the element-wise products is 16 GEMMs, one per tile position. The transforms are
sums and differences of whole tensors (B and A hold only 0 and +-1). 3x3 kernels at stride 1
only.

- forward: as above, tiles overlapping by 2;
- backward-data: the forward algorithm on dy with the filters rotated by 180 degrees and
  input/output channels swapped, padding 2 - p (a stride-1 3x3 full convolution);
- backward-weights: the transpose of the forward identity, exact because that identity is
  bilinear in (g, d): dg = G^T [sum over tiles (A dY A^T) . (B^T d B)] G, with dy cut into
  non-overlapping 2x2 tiles.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch.nn import functional as F

Rows = Sequence[torch.Tensor]


def _input_rows(d: Rows) -> tuple[torch.Tensor, ...]:
    """B^T: four rows of a tile in, four out, additions only."""
    d0, d1, d2, d3 = d
    return d0 - d2, d1 + d2, d2 - d1, d1 - d3


def _filter_rows(g: Rows) -> tuple[torch.Tensor, ...]:
    """G: three filter rows in, four out."""
    g0, g1, g2 = g
    even = (g0 + g2) * 0.5
    return g0, even + g1 * 0.5, even - g1 * 0.5, g2


def _output_rows(m: Rows) -> tuple[torch.Tensor, ...]:
    """A^T: four rows of products in, the two output rows out."""
    m0, m1, m2, m3 = m
    return m0 + m1 + m2, m1 - m2 - m3


def _output_grad_rows(y: Rows) -> tuple[torch.Tensor, ...]:
    """A (the transpose of A^T): two rows of an output-gradient tile in, four out."""
    y0, y1 = y
    return y0, y0 + y1, y0 - y1, -y1


def _filter_grad_rows(s: Rows) -> tuple[torch.Tensor, ...]:
    """G^T: four rows in, the three rows of a filter gradient out."""
    s0, s1, s2, s3 = s
    half = (s1 + s2) * 0.5
    return s0 + half, (s1 - s2) * 0.5, half + s3


def _both(rows: Callable[[Rows], tuple[torch.Tensor, ...]], x: torch.Tensor) -> torch.Tensor:
    """R x R^T over the two leading (tile) dimensions of x, as sums and differences of whole
    tensors: one pass over every tile at once instead of a tiny matrix product per tile."""
    first = torch.stack(rows(x.unbind(0)))
    return torch.stack(rows(first.unbind(1)), dim=1)


def _input_tiles(x: torch.Tensor, padding: tuple[int, int], out_hw: tuple[int, int]
                 ) -> torch.Tensor:
    """(n, c, tiles_h, tiles_w, 4, 4): 4x4 windows at stride 2 over the padded input, padded
    further at the bottom and right so the 2x2 output tiles cover the whole output."""
    h, w = x.shape[-2:]
    tiles_h, tiles_w = math.ceil(out_hw[0] / 2), math.ceil(out_hw[1] / 2)
    xp = F.pad(x, (padding[1], 2 * tiles_w + 2 - w - padding[1],
                   padding[0], 2 * tiles_h + 2 - h - padding[0]))
    return xp.unfold(2, 4, 2).unfold(3, 4, 2)


def forward(x: torch.Tensor, weight: torch.Tensor, padding: tuple[int, int]) -> torch.Tensor:
    n, c, h, w = x.shape
    k = weight.shape[0]
    out_hw = (h + 2 * padding[0] - 2, w + 2 * padding[1] - 2)
    tiles = _input_tiles(x, padding, out_hw)
    tiles_h, tiles_w = tiles.shape[2:4]
    transformed = _both(_input_rows, tiles.permute(4, 5, 1, 0, 2, 3))  # 4, 4, c, n, th, tw
    filters = _both(_filter_rows, weight.permute(2, 3, 0, 1))  # 4, 4, k, c
    products = torch.bmm(filters.reshape(16, k, c), transformed.reshape(16, c, -1))
    out = _both(_output_rows, products.reshape(4, 4, k, n, tiles_h, tiles_w))
    out = out.permute(3, 2, 4, 0, 5, 1).reshape(n, k, 2 * tiles_h, 2 * tiles_w)
    return out[..., : out_hw[0], : out_hw[1]]


def backward_data(grad_out: torch.Tensor, weight: torch.Tensor,
                  padding: tuple[int, int]) -> torch.Tensor:
    rotated = weight.flip(2, 3).transpose(0, 1)
    return forward(grad_out, rotated, (2 - padding[0], 2 - padding[1]))


def backward_weights(x: torch.Tensor, grad_out: torch.Tensor,
                     padding: tuple[int, int]) -> torch.Tensor:
    n, c = x.shape[:2]
    k, out_h, out_w = grad_out.shape[1:]
    tiles = _input_tiles(x, padding, (out_h, out_w))
    tiles_h, tiles_w = tiles.shape[2:4]
    transformed = _both(_input_rows, tiles.permute(4, 5, 1, 0, 2, 3))  # 4, 4, c, n, th, tw
    dy = F.pad(grad_out, (0, 2 * tiles_w - out_w, 0, 2 * tiles_h - out_h))
    dy = dy.reshape(n, k, tiles_h, 2, tiles_w, 2).permute(3, 5, 1, 0, 2, 4)
    dy = _both(_output_grad_rows, dy)  # 4, 4, k, n, th, tw
    sums = torch.bmm(dy.reshape(16, k, -1), transformed.reshape(16, c, -1).transpose(1, 2))
    return _both(_filter_grad_rows, sums.reshape(4, 4, k, c)).permute(2, 3, 0, 1)
