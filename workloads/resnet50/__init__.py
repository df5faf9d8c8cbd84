"""ResNet-50 v1.5 (25.56M parameters at full size)."""
from __future__ import annotations

from torch import nn

from workloads.base import WORKLOADS, Preset, QualityTarget
from workloads.classification import ImageClassification
from workloads.resnet50.model import ResNet50

PRESETS = {
    "tiny": Preset(
        model_kwargs={"num_classes": 10, "base_width": 8, "blocks": (1, 1, 1, 1)},
        input_shape=(3, 32, 32), num_classes=10, batch_size={"cpu": 8, "cuda": 64},
        steps=5, warmup=1, lr=0.05,
        target=QualityTarget("accuracy", 0.5, True, max_epochs=15),
        data="scikit-learn digits upsampled to 32x32", notes="one block per stage, width 8"),
    "small": Preset(
        model_kwargs={"num_classes": 10}, input_shape=(3, 64, 64), num_classes=10,
        batch_size={"cpu": 16, "cuda": 256}, steps=12, warmup=3, lr=0.05,
        target=QualityTarget("accuracy", 0.9, True, max_epochs=30),
        data="scikit-learn digits upsampled to 64x64", notes="full depth and width, 64x64 input"),
    "full": Preset(
        model_kwargs={"num_classes": 1000}, input_shape=(3, 224, 224), num_classes=1000,
        batch_size={"cpu": 16, "cuda": 256}, steps=20, warmup=5, lr=0.05,
        target=QualityTarget("accuracy", 0.9, True, max_epochs=30),
        data="scikit-learn digits upsampled to 224x224, or --data",
        notes="MLPerf's ImageNet target (75.9% top-1) needs --data"),
}


@WORKLOADS.register("resnet50")
class ResNet50Workload(ImageClassification):
    """ResNet-50 v1.5 image classification."""

    name = "resnet50"
    summary = "ResNet-50 v1.5, 224x224x3, 1000 classes"
    presets = PRESETS

    def build_model(self, size: str) -> nn.Module:
        return ResNet50(**self.preset(size).model_kwargs)
