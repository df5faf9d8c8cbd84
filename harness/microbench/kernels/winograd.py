"""Winograd's minimal filtering F(2x2, 3x3) (Lavin and Gray 2016, "Fast Algorithms for
Convolutional Neural Networks"): each 4x4 input tile d and 3x3 filter g give a 2x2 output
Y = A^T [(G g G^T) . (B^T d B)] A with 16 multiplications instead of 36; the sum over input
channels of the element-wise products is 16 GEMMs, one per tile position. 3x3 kernels at
stride 1 only.

- forward: as above, tiles overlapping by 2;
- backward-data: the forward algorithm on dy with the filters rotated by 180 degrees and
  input/output channels swapped, padding 2 - p (a stride-1 3x3 full convolution);
- backward-weights: the transpose of the forward identity, exact because that identity is
  bilinear in (g, d): dg = G^T [sum over tiles (A dY A^T) . (B^T d B)] G, with dy cut into
  non-overlapping 2x2 tiles.
"""
from __future__ import annotations

import math

import torch
from torch.nn import functional as F

_BT = ((1.0, 0.0, -1.0, 0.0), (0.0, 1.0, 1.0, 0.0), (0.0, -1.0, 1.0, 0.0), (0.0, 1.0, 0.0, -1.0))
_G = ((1.0, 0.0, 0.0), (0.5, 0.5, 0.5), (0.5, -0.5, 0.5), (0.0, 0.0, 1.0))
_AT = ((1.0, 1.0, 1.0, 0.0), (0.0, 1.0, -1.0, -1.0))


def _matrices(like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return tuple(torch.tensor(m, dtype=like.dtype, device=like.device)  # type: ignore[return-value]
                 for m in (_BT, _G, _AT))


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
    bt, g, at = _matrices(x)
    filters = (g @ weight @ g.t()).permute(2, 3, 0, 1).reshape(16, k, c)
    tiles = bt @ _input_tiles(x, padding, out_hw) @ bt.t()
    _, _, tiles_h, tiles_w = tiles.shape[:4]
    products = torch.bmm(filters, tiles.permute(4, 5, 1, 0, 2, 3).reshape(16, c, -1))
    products = products.reshape(4, 4, k, n, tiles_h, tiles_w).permute(2, 3, 4, 5, 0, 1)
    out = (at @ products @ at.t()).permute(1, 0, 2, 4, 3, 5)
    return out.reshape(n, k, 2 * tiles_h, 2 * tiles_w)[..., : out_hw[0], : out_hw[1]]


def backward_data(grad_out: torch.Tensor, weight: torch.Tensor,
                  padding: tuple[int, int]) -> torch.Tensor:
    rotated = weight.flip(2, 3).transpose(0, 1)
    return forward(grad_out, rotated, (2 - padding[0], 2 - padding[1]))


def backward_weights(x: torch.Tensor, grad_out: torch.Tensor,
                     padding: tuple[int, int]) -> torch.Tensor:
    n, c = x.shape[:2]
    k, out_h, out_w = grad_out.shape[1:]
    bt, g, at = _matrices(x)
    tiles = bt @ _input_tiles(x, padding, (out_h, out_w)) @ bt.t()
    tiles_h, tiles_w = tiles.shape[2:4]
    dy = F.pad(grad_out, (0, 2 * tiles_w - out_w, 0, 2 * tiles_h - out_h))
    dy = dy.reshape(n, k, tiles_h, 2, tiles_w, 2).permute(0, 1, 2, 4, 3, 5)
    dy = at.t() @ dy @ at
    sums = torch.bmm(dy.permute(4, 5, 1, 0, 2, 3).reshape(16, k, -1),
                     tiles.permute(4, 5, 0, 2, 3, 1).reshape(16, -1, c))
    return g.t() @ sums.reshape(4, 4, k, c).permute(2, 3, 0, 1) @ g
