"""Large-batch training: the learning-rate scaling rule, gradual warm-up, and the layer-wise
optimizers LARS (You, Gitman & Ginsburg 2017) and LAMB (You et al. 2019), applied to any
workload's optimizer_spec (docs/guide/workloads.md#large-batch-training).

A run says `--optimizer default|lars|lamb`, `--lr-scaling none|linear|sqrt` and
`--warmup-epochs E`; `configure` turns the workload's (class, arguments) into the ones the run
trains with. The rate is scaled by k = global batch / the workload's default batch (one
rank's): linear (Goyal et al. 2017) multiplies it by k, sqrt by √k. The warm-up ramps each
group's rate linearly from rate/W to the rate over the first W = E · steps-per-epoch steps; an
epoch's length is known once the training set is (`Warmup.start`, called by the
time-to-train loop): a throughput run, with no epochs, trains at the full rate.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from harness.core.errors import UsageError
from harness.spec.specs import LARS_ETA, LR_SCALINGS, OPTIMIZERS


def scaled_lr(lr: float, rule: str, ratio: float) -> float:
    """The rate at `ratio` times the workload's batch under `rule`."""
    if rule == "linear":
        return lr * ratio
    if rule == "sqrt":
        return lr * math.sqrt(ratio)
    if rule == "none":
        return lr
    raise UsageError(f"unknown --lr-scaling {rule!r}; choose from: {', '.join(LR_SCALINGS)}")


@dataclass
class Warmup:
    """Gradual warm-up over `epochs` epochs, shared by reference with every optimizer that
    uses it; inactive until the epoch's length is known."""

    epochs: float
    steps: int = 0

    def start(self, steps_per_epoch: int) -> None:
        """The training set's steps per epoch: the warm-up lasts epochs × that many steps."""
        self.steps = max(1, round(self.epochs * steps_per_epoch)) if self.epochs > 0 else 0

    def factor(self, step: int) -> float:
        """The fraction of the rate for the step-th (0-based) update."""
        if self.steps <= 0 or step >= self.steps:
            return 1.0
        return (step + 1) / self.steps


def trust_ratio(weight_norm: float, update_norm: float, eta: float = 1.0,
                weight_decay: float = 0.0) -> float:
    """η‖w‖ / (‖u‖ + β‖w‖): a layer's rate relative to the global one; 1 where either norm
    is 0 (a zero-initialised layer would otherwise never move)."""
    if weight_norm <= 0.0 or update_norm <= 0.0:
        return 1.0
    return eta * weight_norm / (update_norm + weight_decay * weight_norm)


def _norm(tensor: torch.Tensor) -> float:
    norm = torch.linalg.vector_norm(tensor.detach().float())
    full = getattr(norm, "full_tensor", None)  # a sharded (DTensor) parameter's whole norm
    return float(full() if callable(full) else norm)


def layerwise(parameter: torch.Tensor) -> bool:
    """Whether a parameter gets its own trust ratio: weight tensors; biases and normalisation
    scales (one dimension) keep the global rate."""
    return parameter.dim() > 1


class _WarmedUp(torch.optim.Optimizer):
    """An optimizer whose groups' rates follow a Warmup: each group's `lr` is its
    `scheduled_lr` times the warm-up factor, set before every step."""

    def _start_warmup(self, warmup: Warmup | None) -> None:
        self.warmup = warmup
        self.updates = 0
        for group in self.param_groups:
            group.setdefault("scheduled_lr", group["lr"])
        if warmup is not None:
            self.register_step_pre_hook(_warm)


def _warm(optimizer: Any, args: Any, kwargs: Any) -> None:
    factor = optimizer.warmup.factor(optimizer.updates)
    for group in optimizer.param_groups:
        group["lr"] = group["scheduled_lr"] * factor
    optimizer.updates += 1


class WarmupSGD(torch.optim.SGD, _WarmedUp):
    """torch.optim.SGD with a gradual warm-up of its rate."""

    def __init__(self, params: Iterable[Any], *, warmup: Warmup | None = None,
                 **kwargs: Any) -> None:
        super().__init__(params, **kwargs)
        self._start_warmup(warmup)


class LARS(_WarmedUp):
    """Layer-wise adaptive rate scaling (You, Gitman & Ginsburg 2017, Algorithm 1): for each
    weight tensor, λ = η‖w‖ / (‖g‖ + β‖w‖); v ← m·v + γ·λ·(g + β·w); w ← w − v, with γ the
    global rate (scaled and warmed up), m the momentum, β the weight decay. The last λ of
    each parameter is kept in its state (`trust_ratio`)."""

    def __init__(self, params: Iterable[Any], lr: float, momentum: float = 0.0,
                 weight_decay: float = 0.0, eta: float = LARS_ETA,
                 warmup: Warmup | None = None, **ignored: Any) -> None:
        super().__init__(params, {"lr": lr, "momentum": momentum,
                                  "weight_decay": weight_decay, "eta": eta})
        self._start_warmup(warmup)

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            decay, momentum = group["weight_decay"], group["momentum"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                ratio = trust_ratio(_norm(p), _norm(p.grad), group["eta"], decay) \
                    if layerwise(p) else 1.0
                state = self.state[p]
                state["trust_ratio"] = ratio
                update = p.grad.add(p, alpha=decay) if decay else p.grad.clone()
                update.mul_(group["lr"] * ratio)
                if momentum:
                    velocity = state.get("momentum_buffer")
                    update = update if velocity is None else velocity.mul_(momentum).add_(update)
                    state["momentum_buffer"] = update
                p.sub_(update)
        return loss


class LAMB(_WarmedUp):
    """Layer-wise adaptive moments (You et al. 2019, Algorithm 2): Adam's bias-corrected
    r = m̂ / (√v̂ + ε) + β·w, then w ← w − γ · (‖w‖ / ‖r‖) · r for each weight tensor (the
    ratio kept in its state as `trust_ratio`)."""

    def __init__(self, params: Iterable[Any], lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-6, weight_decay: float = 0.0, warmup: Warmup | None = None,
                 **ignored: Any) -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps,
                                  "weight_decay": weight_decay})
        self._start_warmup(warmup)

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state.update(step=0, exp_avg=torch.zeros_like(p),
                                 exp_avg_sq=torch.zeros_like(p))
                state["step"] += 1
                state["exp_avg"].mul_(beta1).add_(p.grad, alpha=1 - beta1)
                state["exp_avg_sq"].mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                first = state["exp_avg"] / (1 - beta1 ** state["step"])
                second = state["exp_avg_sq"] / (1 - beta2 ** state["step"])
                update = first / (second.sqrt() + group["eps"])
                if group["weight_decay"]:
                    update.add_(p, alpha=group["weight_decay"])
                ratio = trust_ratio(_norm(p), _norm(update)) if layerwise(p) else 1.0
                state["trust_ratio"] = ratio
                p.sub_(update, alpha=group["lr"] * ratio)
        return loss


def configure(optimizer_class: type[torch.optim.Optimizer], kwargs: dict[str, Any], *,
              optimizer: str = "default", lr_scaling: str = "none", batch_ratio: float = 1.0,
              warmup: Warmup | None = None, lars_eta: float = LARS_ETA,
              ) -> tuple[type[torch.optim.Optimizer], dict[str, Any]]:
    """The (class, arguments) a run trains with: the workload's, its rate scaled for the
    batch, warmed up, and for lars/lamb the layer-wise optimizer with the workload's
    momentum (LARS) and weight decay. Unchanged when every option has its default."""
    if optimizer not in OPTIMIZERS:
        raise UsageError(f"unknown --optimizer {optimizer!r}; choose from: "
                         f"{', '.join(OPTIMIZERS)}")
    kwargs = dict(kwargs, lr=scaled_lr(float(kwargs["lr"]), lr_scaling, batch_ratio))
    if warmup is not None and warmup.epochs <= 0:
        warmup = None
    if optimizer == "lars":
        return LARS, {"lr": kwargs["lr"], "momentum": kwargs.get("momentum", 0.0),
                      "weight_decay": kwargs.get("weight_decay", 0.0), "eta": lars_eta,
                      "warmup": warmup}
    if optimizer == "lamb":
        return LAMB, {"lr": kwargs["lr"], "weight_decay": kwargs.get("weight_decay", 0.0),
                      "warmup": warmup}
    if warmup is None:
        return optimizer_class, kwargs
    if optimizer_class is not torch.optim.SGD:
        raise UsageError(f"--warmup-epochs: the workload's optimizer is "
                         f"{optimizer_class.__name__}; warm-up is implemented for SGD, LARS "
                         "and LAMB")
    return WarmupSGD, dict(kwargs, warmup=warmup)
