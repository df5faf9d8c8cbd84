"""Where the shapes come from: the workloads' own layers, DeepBench's lists, the sets."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from harness.core.errors import UsageError
from harness.microbench.kernels import deepbench
from harness.microbench.kernels.sets import SETS, SWEEP_KERNEL_SIZES, get_set
from harness.microbench.kernels.shapes import AttentionShape, ConvShape, GemmShape, LstmShape
from harness.microbench.kernels.workload_shapes import (
    WorkloadKernels,
    linear_gemms,
    workload_kernels,
)


@pytest.fixture(scope="module")
def found() -> WorkloadKernels:
    return workload_kernels()


def _count(module_type: type[nn.Module], workload: str) -> int:
    from workloads import get_workload

    with torch.device("meta"):
        model = get_workload(workload).build_model("full")
    return sum(isinstance(m, module_type) for m in model.modules())


def test_every_convolution_layer_of_the_workloads_is_covered(found: WorkloadKernels) -> None:
    for workload in ("alexnet", "resnet50", "hep_cnn"):
        layers = sum(1 for sources in found.convs.values() for s in sources
                     if s.startswith(workload + " "))
        assert layers == _count(nn.Conv2d, workload)
    assert _count(nn.Conv2d, "resnet50") == 53
    # AlexNet's first layer at batch 32: 11x11, stride 4, padding 2.
    assert found.convs[ConvShape(32, 3, 224, 224, 64, 11, 11, (4, 4), (2, 2))] == [
        "alexnet features.0"]
    # Shapes are distinct; 32 of them across the three image models.
    assert len(found.convs) == len(set(found.convs)) == 32


def test_linear_layers_give_three_gemms_each(found: WorkloadKernels) -> None:
    fwd, bwd_data, bwd_weights = linear_gemms(32, 9216, 4096)
    assert fwd == ("fwd", GemmShape(32, 4096, 9216, False, True))
    assert bwd_data == ("bwd_data", GemmShape(32, 9216, 4096, False, False))
    assert bwd_weights == ("bwd_weights", GemmShape(4096, 9216, 32, True, False))
    assert found.gemms[GemmShape(32, 4096, 9216, False, True)] == ["alexnet classifier.1 fwd"]
    # The lstm workload: 20 x 35 tokens, 650 wide, 4 x 650 gates, a 10,000-word decoder.
    assert GemmShape(700, 2600, 650, False, True) in found.gemms
    assert GemmShape(20, 2600, 650, False, True) in found.gemms
    assert GemmShape(700, 10000, 650, False, True) in found.gemms
    assert list(found.lstm_cells) == [LstmShape(20, 650, 650)]


def test_gpt_brings_its_gemms_and_its_attention(found: WorkloadKernels) -> None:
    """GPT-2 small at the default CPU batch (4 x 1,024 tokens): the q/k/v projection, the
    MLP and the tied vocabulary head as GEMMs, one attention shape of 12 heads of 64."""
    rows = 4 * 1024
    for fan_in, fan_out in ((768, 2304), (768, 768), (768, 3072), (3072, 768), (768, 50257)):
        assert GemmShape(rows, fan_out, fan_in, False, True) in found.gemms
    assert found.attentions == {AttentionShape(4, 12, 1024, 64): [
        f"gpt blocks.{i}.attn.attention" for i in range(12)]}
    attention = get_set("attention").cases()
    assert {c.family for c in attention} == {"memory", "attention"}
    assert {c.shape for c in attention if c.family == "attention"} >= {
        AttentionShape(4, 12, 1024, 64), AttentionShape(8, 6, 256, 64)}


def test_deepbench_tuples_become_shapes() -> None:
    convs = deepbench.conv_shapes()
    assert len(convs) == len(deepbench.CONV) == 8
    assert convs[0] == ConvShape(16, 1, 161, 700, 32, 5, 20, (2, 2), (0, 0))
    assert deepbench.gemm_shapes()[3] == GemmShape(2048, 32, 2048, True, False)
    assert len(deepbench.gemm_shapes()) == 15
    assert deepbench.lstm_shapes()[0] == LstmShape(16, 512, 512)


def test_sets_start_with_the_bandwidth_kernels_and_full_has_each_shape_once() -> None:
    for kernel_set in SETS.values():
        assert kernel_set.cases()[0].family == "memory"
    sweep = [c.shape.r for c in get_set("sweep").cases() if c.family == "conv"]
    assert tuple(sweep) == SWEEP_KERNEL_SIZES
    full = get_set("full").cases()
    keys = [(c.family, c.shape) for c in full]
    assert len(keys) == len(set(keys))
    parts = {(c.family, c.shape) for name in ("workloads", "attention", "deepbench", "sweep")
             for c in get_set(name).cases()}
    assert set(keys) == parts


def test_unknown_set_names_the_sets() -> None:
    with pytest.raises(UsageError, match="unknown kernel set 'huge'; choose from: tiny, "
                                         "workloads, attention, deepbench, sweep, full"):
        get_set("huge")
