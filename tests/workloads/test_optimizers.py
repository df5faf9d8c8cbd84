"""Large-batch training options (workloads/optimizers.py): LARS's and LAMB's trust ratios per
layer against hand computations, the learning-rate scaling rules, the warm-up ramp, and a run
that asks for them training with them."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from harness.core.errors import UsageError
from harness.rank.trainer import Trainer
from harness.run.plan import resolve
from workloads.optimizers import LAMB, LARS, Warmup, WarmupSGD, configure, trust_ratio


def two_layers() -> nn.Sequential:
    model = nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 1))
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[3.0, 0.0, 4.0], [0.0, 0.0, 0.0]]))  # |w| = 5
        model[0].bias.zero_()
        model[1].weight.copy_(torch.tensor([[1.0, 0.0]]))                      # |w| = 1
        model[1].bias.fill_(0.5)
    grads = [torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]]), torch.tensor([0.2, 0.0]),
             torch.tensor([[0.0, 2.0]]), torch.tensor([1.0])]
    for parameter, grad in zip(model.parameters(), grads, strict=True):
        parameter.grad = grad
    return model


def test_lars_trust_ratio_per_layer_is_the_hand_computation() -> None:
    model = two_layers()
    before = [p.detach().clone() for p in model.parameters()]
    lr, eta, decay = 0.5, 0.001, 0.01
    optimizer = LARS(model.parameters(), lr=lr, momentum=0.9, weight_decay=decay, eta=eta)
    optimizer.step()
    # eta |w| / (|g| + decay |w|) by hand: 0.001 * 5 / (1 + 0.05) and 0.001 * 1 / (2 + 0.01)
    by_hand = [0.005 / 1.05, 1.0, 0.001 / 2.01, 1.0]  # biases keep the global rate
    ratios = [optimizer.state[p]["trust_ratio"] for p in model.parameters()]
    assert ratios == pytest.approx(by_hand, rel=1e-12)
    for old, new, ratio in zip(before, model.parameters(), by_hand, strict=True):
        expected = old - lr * ratio * (new.grad + decay * old)
        torch.testing.assert_close(new.detach(), expected, rtol=1e-6, atol=1e-9)
    assert trust_ratio(0.0, 3.0, 0.001) == trust_ratio(2.0, 0.0, 0.001) == 1.0


def test_lamb_trust_ratio_is_the_weight_norm_over_the_adam_update_norm() -> None:
    model = two_layers()
    with torch.no_grad():
        model[1].weight.copy_(torch.tensor([[3.0, 4.0]]))
    optimizer = LAMB(model.parameters(), lr=0.1)
    optimizer.step()
    # first step: m^ = g, v^ = g^2, so r = g / (|g| + eps): [0, ~1] for the second layer
    r = 2.0 / (2.0 + 1e-6)
    assert optimizer.state[model[1].weight]["trust_ratio"] == pytest.approx(5.0 / r, rel=1e-6)
    torch.testing.assert_close(model[1].weight.detach(),
                               torch.tensor([[3.0, 4.0 - 0.1 * 5.0]]), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("rule", "factor"), [("none", 1.0), ("linear", 8.0),
                                              ("sqrt", math.sqrt(8.0))])
def test_learning_rate_scaling_rules(rule: str, factor: float) -> None:
    cls, kwargs = configure(torch.optim.SGD, {"lr": 0.02, "momentum": 0.9}, lr_scaling=rule,
                            batch_ratio=8.0)
    assert cls is torch.optim.SGD and kwargs == {"lr": pytest.approx(0.02 * factor),
                                                 "momentum": 0.9}


def test_warmup_ramps_the_rate_over_its_steps_then_holds_it() -> None:
    warmup = Warmup(epochs=0.5)
    cls, kwargs = configure(torch.optim.SGD, {"lr": 0.4}, warmup=warmup)
    parameter = nn.Parameter(torch.zeros(1))
    optimizer = cls([parameter], **kwargs)
    assert cls is WarmupSGD
    warmup.start(steps_per_epoch=8)  # 4 warm-up steps
    rates = []
    for _ in range(6):
        parameter.grad = torch.ones(1)
        optimizer.step()
        rates.append(optimizer.param_groups[0]["lr"])
    assert rates == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.4, 0.4])
    assert float(parameter.detach()) == pytest.approx(-sum(rates))


def test_a_run_trains_with_the_options_it_names(cache_dir: object) -> None:
    default = resolve({"workload": "hep_cnn", "size": "tiny"}, None)
    spec = resolve({"workload": "hep_cnn", "size": "tiny", "batch_size": 128,
                    "optimizer": "lars", "lr_scaling": "linear", "warmup_epochs": 1.0}, None)
    assert (spec.optimizer, spec.lr_scaling, spec.warmup_epochs) == ("lars", "linear", 1.0)
    assert spec.key() != spec.replace(optimizer="default").key()
    assert default.key() == resolve({"workload": "hep_cnn", "size": "tiny",
                                     "optimizer": "default"}, None).key()
    trainer = Trainer(spec.replace(steps=1, warmup=0, peak="cached"))
    assert isinstance(trainer.strategy.optimizer, LARS)
    # 128 samples against the workload's default 16: 8 x its 0.02
    assert trainer.recipe.optimizer_kwargs["lr"] == pytest.approx(0.16)


def test_parameter_servers_refuse_layer_wise_optimizers_and_warmup() -> None:
    for options in ({"optimizer": "lars"}, {"warmup_epochs": 1.0}):
        with pytest.raises(UsageError, match="flat shards"):
            resolve({"workload": "lstm", "size": "tiny", "nproc": 3, "strategy": "ps-sync",
                     **options}, None)
    resolve({"workload": "lstm", "size": "tiny", "nproc": 3, "strategy": "ps-sync",
             "lr_scaling": "linear"}, None)
