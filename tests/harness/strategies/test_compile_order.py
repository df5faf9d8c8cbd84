"""Wrap, then compile: the strategies that wrap the model (DDP, ZeRO-1 on DDP, FSDP2) compile
the wrapper, as PyTorch's DDP notes do, so that DDP's buckets overlap the compiled backward.
Built on torch's fake process group (two ranks in one process, no traffic); compiling is lazy,
so nothing is compiled here: the test reads which module torch.compile wrapped."""
from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist
from torch import nn

from harness.spec.specs import RunSpec
from harness.strategies import STRATEGIES
from harness.strategies.base import RankPlace, Recipe

OptimizedModule = torch._dynamo.eval_frame.OptimizedModule


@pytest.fixture
def two_fake_ranks() -> Iterator[None]:
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _recipe(compile_model: bool, built: list[bool]) -> Recipe:
    def build_model(compiled: bool = True) -> nn.Module:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
        built.append(compiled)
        return torch.compile(model) if compiled and compile_model else model  # type: ignore

    return Recipe(build_model=build_model,
                  build_optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
                  optimizer_class=torch.optim.SGD, optimizer_kwargs={"lr": 0.1},
                  loss=nn.functional.cross_entropy, autocast=lambda: None,
                  device=torch.device("cpu"), compile=compile_model)


def _strategy(name: str, compile_model: bool, built: list[bool]) -> nn.Module:
    spec = RunSpec(workload="hep_cnn", size="tiny", batch_per_rank=4, steps=4, warmup=1,
                   nproc_per_node=2, comm="gloo", strategy=name, compile=compile_model)
    strategy = STRATEGIES.get(name)(spec, RankPlace(0, 2, 0, torch.device("cpu")),
                                    _recipe(compile_model, built), None)
    strategy.setup()
    assert strategy.model is not None
    return strategy.model


@pytest.mark.parametrize("name, wrapper", [
    ("ddp", nn.parallel.DistributedDataParallel),
    ("zero1", nn.parallel.DistributedDataParallel),
    ("fsdp", nn.Sequential),  # fully_shard makes the root module its FSDP subclass
])
def test_wrapping_strategies_compile_the_wrapper_not_the_model_inside(
        two_fake_ranks: None, name: str, wrapper: type[nn.Module]) -> None:
    built: list[bool] = []
    model = _strategy(name, True, built)
    assert built == [False]  # built uncompiled
    assert isinstance(model, OptimizedModule)
    inner = model._orig_mod
    assert isinstance(inner, wrapper)
    if name == "fsdp":
        from torch.distributed.fsdp import FSDPModule

        assert isinstance(inner, FSDPModule)
    # nothing inside the wrapper is compiled: the wrapper's hooks see every parameter
    assert not any(isinstance(m, OptimizedModule) for m in inner.modules())


@pytest.mark.parametrize("name", ["ddp", "zero1", "fsdp"])
def test_without_compile_nothing_is_compiled(two_fake_ranks: None, name: str) -> None:
    model = _strategy(name, False, [])
    assert not any(isinstance(m, OptimizedModule) for m in model.modules())
