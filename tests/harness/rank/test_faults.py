"""The training faults DTBENCH_FAULT can inject (issue 57): a run that trains another model than
its spec says, for `compare --trajectory` to catch."""
from __future__ import annotations

import pytest
import torch

from harness.rank.faults import inject_fault, mistrain
from harness.rank.loops import run_throughput
from harness.rundir import FAULT_VAR
from harness.spec.specs import RunSpec

SPEC = RunSpec(workload="lstm", size="tiny", batch_per_rank=4, steps=3, warmup=1, threads=1)


def test_lr_times_scales_every_group_s_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD([{"params": [model.weight], "lr": 0.5},
                                 {"params": [model.bias], "lr": 2.0}])
    monkeypatch.setenv(FAULT_VAR, "lr-times:1.01")
    mistrain(model, optimizer)
    assert [g["lr"] for g in optimizer.param_groups] == [0.5 * 1.01, 2.0 * 1.01]
    inject_fault(0, 0, model)  # a training fault is no per-step fault: nothing happens


def test_sum_gradients_needs_ddp(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FAULT_VAR, "sum-gradients")
    with pytest.raises(RuntimeError, match="needs a ddp run of several ranks"):
        mistrain(torch.nn.Linear(2, 2), None)


def test_a_run_with_the_rate_changed_trains_another_model(
        monkeypatch: pytest.MonkeyPatch) -> None:
    saved = torch.get_num_threads()
    try:
        plain = run_throughput(SPEC, progress=lambda *args: None).losses
        monkeypatch.setenv(FAULT_VAR, "lr-times:2")
        faster = run_throughput(SPEC, progress=lambda *args: None).losses
    finally:
        torch.set_num_threads(saved)
    assert plain[0] != faster[0] and len(plain) == len(faster) == 3
