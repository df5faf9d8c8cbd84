"""The Strategy seam: registry, options, validation, spec identity, and the byte meter."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from harness.comm.meter import CommMeter
from harness.core.errors import UsageError
from harness.run.plan import resolve
from harness.spec.specs import RunSpec
from harness.strategies import STRATEGIES
from harness.strategies.base import tensor_bytes


def plan(**options: object) -> RunSpec:
    return resolve({"workload": "hep_cnn", "size": "tiny", **options}, None)


def test_the_synchronous_data_parallel_family_is_registered() -> None:
    assert {"ddp", "zero1", "fsdp", "localsgd"} <= set(STRATEGIES.names())
    for name in ("ddp", "zero1", "fsdp", "localsgd"):
        cls = STRATEGIES.get(name)
        assert cls.summary and cls.family and cls.engine


def test_options_are_typed_and_aliases_resolve() -> None:
    assert plan(strategy="localsgd", strategy_options={"H": "3"}, nproc=2).options == \
        {"period": 3}
    assert plan(compression="fp16", nproc=2).options == {"compression": "fp16"}


@pytest.mark.parametrize(("options", "message"), [
    ({"strategy": "nope"}, "unknown strategy 'nope'; choose from: ddp"),
    ({"strategy": "localsgd", "strategy_options": {"H": "0"}, "nproc": 2}, "must be >= 1"),
    ({"strategy": "localsgd", "strategy_options": {"period": "two"}, "nproc": 2},
     "expected int"),
    ({"strategy": "fsdp", "strategy_options": {"bucket_mb": "5"}, "nproc": 2},
     "strategy fsdp takes no option 'bucket_mb'"),
    ({"strategy": "zero1", "compression": "fp16", "nproc": 2},
     "--compression is an option of --strategy ddp"),
    ({"strategy": "ddp", "strategy_options": {"compression": "zip"}, "nproc": 2},
     "'zip' is not one of none, fp16, bf16, powersgd"),
    ({"compression": "fp16"}, "--compression needs several ranks"),
    ({"straggler": "5:2", "nproc": 2}, "--straggler rank 5 is not a rank"),
    ({"straggler": "1:0.5", "nproc": 2}, "expected RANK:FACTOR"),
])
def test_bad_strategy_input_is_a_usage_error(options: dict, message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        plan(**options)


def test_strategy_is_part_of_the_key_and_old_records_read_as_ddp() -> None:
    ddp, zero1 = plan(nproc=2), plan(nproc=2, strategy="zero1")
    assert ddp.key() != zero1.key()
    old = ddp.as_dict()
    for field in ("strategy", "strategy_options", "straggler", "replicas"):
        old.pop(field)
    old.update(bucket_mb=25, compression="none")
    assert RunSpec.from_dict(old).strategy == "ddp"
    assert RunSpec.from_dict(old).key() == ddp.key()
    fp16 = dict(old, compression="fp16")
    assert RunSpec.from_dict(fp16).options == {"compression": "fp16"}


def test_tensor_bytes_counts_parameters_gradients_and_optimizer_state() -> None:
    model = nn.Linear(10, 5)  # 55 parameters
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    assert tensor_bytes(model, optimizer) == {"parameters": 220, "gradients": 0,
                                              "optimizer": 0}
    model(torch.randn(2, 10)).sum().backward()
    optimizer.step()
    assert tensor_bytes(model, optimizer) == {"parameters": 220, "gradients": 220,
                                              "optimizer": 220}


def test_meter_files_calls_by_context_group_and_collective() -> None:
    meter = CommMeter()
    group = object()
    meter.label_group(group, "activation")
    meter.add("allreduce", 5, 10, group)
    meter.add("allgather", 40, 20, None)
    with meter.kind("control"):
        meter.add("allreduce", 1, 1, group)
    assert meter.end_step() == {"gradient": 0, "parameter": 20, "activation": 10,
                                "control": 1}
    assert meter.payload_steps == [46]
    assert meter.calls == {"allreduce": 2, "allgather": 1}
    with pytest.raises(ValueError, match="unknown traffic kind"):
        with meter.kind("gossip"):
            pass


def test_meter_keeps_traffic_outside_the_steps_apart_by_phase() -> None:
    """Evaluation and stop decisions inside a step's span, and set-up traffic before the first
    step, never land in a step's count."""
    meter = CommMeter()
    meter.add("broadcast", 100, 50, None)
    meter.discard()                        # set-up: the first step starts clean
    meter.add("allreduce", 8, 8, None)
    with meter.outside("evaluation"):
        meter.add("allgather", 30, 15, None)
        with meter.kind("gradient"):
            meter.add("allreduce", 2, 2, None)
    with meter.outside("stop decision"):
        meter.add("broadcast", 4, 2, None)
    assert meter.end_step() == {"gradient": 8, "parameter": 0, "activation": 0, "control": 0}
    assert meter.payload_steps == [8]
    assert meter.outside_steps == {"setup": {"payload": 100, "wire": 50},
                                   "evaluation": {"payload": 32, "wire": 17},
                                   "stop decision": {"payload": 4, "wire": 2}}
    meter.discard("after the steps")      # nothing counted since: no phase appears
    assert "after the steps" not in meter.outside_steps


def test_parameter_servers_take_their_own_momentum() -> None:
    """The servers' SGD keeps the workload's momentum unless momentum=M says otherwise (stale
    gradients add implicit momentum); M >= 1 is refused."""
    from types import SimpleNamespace

    cls = STRATEGIES.get("ssp")
    given = plan(strategy="ssp", strategy_options={"s": "1", "momentum": "0.5"}, nproc=3)
    default = plan(strategy="ssp", strategy_options={"s": "1"}, nproc=3)
    assert cls.momentum(given) == 0.5 and cls.momentum(default) is None
    assert given.key() != default.key()
    model = nn.Linear(4, 2)
    recipe = SimpleNamespace(build_optimizer=lambda params: torch.optim.SGD(
        params, lr=0.1, momentum=0.9), optimizer_kwargs={"lr": 0.1, "momentum": 0.9})
    for spec, expected in ((given, 0.5), (default, 0.9)):
        server = cls.__new__(cls)
        server.spec, server.recipe = spec, recipe
        (group,) = server.server_optimizer(list(model.parameters())).param_groups
        assert group["momentum"] == expected
    assert STRATEGIES.get("ddp").options and "momentum" not in {
        o.name for o in STRATEGIES.get("ddp").options}
    with pytest.raises(UsageError, match="momentum=1 must be below 1"):
        plan(strategy="ps-async", strategy_options={"momentum": "1"}, nproc=3)


def _server_momentum(name: str, nproc: int, recipe_momentum: float | None = 0.9,
                     **options: str) -> float:
    from types import SimpleNamespace

    kwargs = {"lr": 0.1} if recipe_momentum is None else {"lr": 0.1,
                                                          "momentum": recipe_momentum}
    cls = STRATEGIES.get(name)
    server = cls.__new__(cls)
    server.spec = plan(strategy=name, strategy_options=options, nproc=nproc)
    server.recipe = SimpleNamespace(build_optimizer=lambda params: torch.optim.SGD(
        params, **kwargs), optimizer_kwargs=kwargs)
    (group,) = server.server_optimizer(list(nn.Linear(4, 2).parameters())).param_groups
    return float(group["momentum"])


def test_asynchronous_rules_default_to_less_momentum_the_more_pushers() -> None:
    """ps-async, downpour and hybrid default to max(0, 1 - P(1 - mu)) for P independent
    pushers (workers; hybrid's groups): the workload's momentum for one, less for more; the
    synchronous and bounded rules (ps-sync, ssp) keep the workload's; momentum=M wins."""
    from harness.strategies.ps import async_momentum

    assert async_momentum(0.9, 1) == pytest.approx(0.9)
    assert async_momentum(0.9, 2) == pytest.approx(0.8)
    assert async_momentum(0.9, 4) == pytest.approx(0.6)
    assert async_momentum(0.9, 10) == 0.0 and async_momentum(0.9, 20) == 0.0
    assert async_momentum(0.0, 3) == 0.0
    # 1 server + 2 workers
    assert _server_momentum("ps-async", 3) == pytest.approx(0.8)
    assert _server_momentum("downpour", 3) == pytest.approx(0.8)
    assert _server_momentum("ps-async", 2) == pytest.approx(0.9)  # one worker: unchanged
    assert _server_momentum("ps-async", 5) == pytest.approx(0.6)  # four workers
    assert _server_momentum("ps-async", 5, servers="2") == pytest.approx(0.7)  # three
    # hybrid: one leader per group pushes
    assert _server_momentum("hybrid", 3) == pytest.approx(0.8)  # two groups of one
    assert _server_momentum("hybrid", 3, groups="1") == pytest.approx(0.9)
    assert _server_momentum("hybrid", 5, groups="2") == pytest.approx(0.8)
    # synchronous and bounded rules, the option, and a recipe without momentum
    assert _server_momentum("ps-sync", 3) == pytest.approx(0.9)
    assert _server_momentum("ssp", 3, s="1") == pytest.approx(0.9)
    assert _server_momentum("ps-async", 3, momentum="0.9") == pytest.approx(0.9)
    assert _server_momentum("ps-async", 3, recipe_momentum=None) == 0.0


def test_tensor_parallelism_refuses_a_group_that_does_not_divide_the_split_layers() -> None:
    """alexnet tiny's 512-wide FC layers split over 3 ranks failed mid-run in DTensor's
    matmul; the spec is refused before any rank starts, and 2 ranks pass."""

    def spec(n: int) -> RunSpec:
        return RunSpec(workload="alexnet", size="tiny", comm="gloo", nproc_per_node=n,
                       strategy="tensor")

    STRATEGIES.get("tensor").check(spec(2))
    with pytest.raises(UsageError, match="512 features across 3 ranks"):
        STRATEGIES.get("tensor").check(spec(3))
