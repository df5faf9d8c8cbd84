"""One LSTM cell step, forward and backward, two ways: torch.lstm_cell (two GEMMs and the
gate arithmetic as separate ATen operations) and a one-step, one-layer torch.lstm, which on
the CPU runs oneDNN's fused RNN primitive (mkldnn_rnn_layer), as the lstm workload's nn.LSTM
does. Both are checked against lstm_cell in fp32: outputs (h', c') forward, and the gradients
of x, h, c and all weights and biases backward."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from harness.microbench.kernels.family import FAMILIES, KernelFamily, Operands, random_tensor
from harness.microbench.kernels.shapes import LstmShape, Shape

INPUTS = ("x", "h", "c", "w_ih", "w_hh", "b_ih", "b_hh")


def lstm_cell(o: Operands) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.lstm_cell(o["x"], (o["h"], o["c"]), o["w_ih"], o["w_hh"], o["b_ih"], o["b_hh"])


def onednn_rnn(o: Operands) -> tuple[torch.Tensor, torch.Tensor]:
    _, h, c = torch.lstm(o["x"].unsqueeze(0), (o["h"].unsqueeze(0), o["c"].unsqueeze(0)),
                         [o["w_ih"], o["w_hh"], o["b_ih"], o["b_hh"]], True, 1, 0.0, True,
                         False, False)
    return h[0], c[0]


CELLS = {"lstm_cell": lstm_cell, "onednn_rnn": onednn_rnn}


def _backward_call(cell: Callable[[Operands], Any], operands: Operands) -> Callable[[], Any]:
    """The backward pass alone: the forward graph is built once and kept (retain_graph)."""
    leaves = {name: operands[name].detach().requires_grad_() for name in INPUTS}
    outputs = cell(leaves)
    grads = (operands["dh"], operands["dc"])
    inputs = tuple(leaves[name] for name in INPUTS)
    return lambda: torch.autograd.grad(outputs, inputs, grads, retain_graph=True)


@FAMILIES.register("lstm")
class LstmFamily(KernelFamily):
    """An LSTM cell step (forward, backward) by ATen's lstm_cell and oneDNN's RNN."""

    name = "lstm"
    algorithms = tuple(CELLS)

    def operands(self, shape: Shape, pass_: str, precision: str, device: torch.device,
                 generator: torch.Generator) -> Operands:
        assert isinstance(shape, LstmShape)
        b, i, h = shape.batch, shape.input, shape.hidden
        sizes = {"x": (b, i), "h": (b, h), "c": (b, h), "w_ih": (4 * h, i), "w_hh": (4 * h, h),
                 "b_ih": (4 * h,), "b_hh": (4 * h,)}
        if pass_ != "fwd":
            sizes.update(dh=(b, h), dc=(b, h))
        return {name: random_tensor(size, precision, device, generator) * (
            h ** -0.5 if name.startswith(("w_", "b_")) else 1.0) for name, size in sizes.items()}

    def reference(self, operands: Operands, shape: Shape, pass_: str) -> Any:
        fp32 = {name: tensor.float() for name, tensor in operands.items()}
        return self.build("lstm_cell", fp32, shape, pass_)()

    def build(self, algorithm: str, operands: Operands, shape: Shape,
              pass_: str) -> Callable[[], Any]:
        cell = CELLS[algorithm]
        if pass_ == "fwd":
            return lambda: cell(operands)
        return _backward_call(cell, operands)
