"""AlexNet: the torchvision variant (61.1M parameters at full size)."""
from __future__ import annotations

from torch import nn

from workloads.alexnet.model import AlexNet
from workloads.base import WORKLOADS, Preset, QualityTarget
from workloads.classification import ImageClassification

PRESETS = {
    "tiny": Preset(
        model_kwargs={"num_classes": 10, "width": 0.125}, input_shape=(3, 64, 64),
        num_classes=10, batch_size={"cpu": 8, "cuda": 64}, steps=5, warmup=1, lr=0.003,
        target=QualityTarget("accuracy", 0.5, True, max_epochs=20),
        data="scikit-learn digits upsampled to 64x64", notes="1/8 of every layer's width"),
    "small": Preset(
        model_kwargs={"num_classes": 10, "width": 0.5}, input_shape=(3, 128, 128),
        num_classes=10, batch_size={"cpu": 32, "cuda": 256}, steps=12, warmup=3, lr=0.01,
        target=QualityTarget("accuracy", 0.9, True, max_epochs=30),
        data="scikit-learn digits upsampled to 128x128", notes="half of every layer's width"),
    "full": Preset(
        model_kwargs={"num_classes": 1000}, input_shape=(3, 224, 224), num_classes=1000,
        batch_size={"cpu": 32, "cuda": 256}, steps=20, warmup=5, lr=0.01,
        target=QualityTarget("accuracy", 0.9, True, max_epochs=30),
        data="scikit-learn digits upsampled to 224x224, or --data",
        notes="torchvision AlexNet; MLPerf-style ImageNet targets need --data"),
}


@WORKLOADS.register("alexnet")
class AlexNetWorkload(ImageClassification):
    """AlexNet image classification."""

    name = "alexnet"
    summary = "AlexNet (torchvision variant), 224x224x3, 1000 classes"
    presets = PRESETS

    def build_model(self, size: str) -> nn.Module:
        return AlexNet(**self.preset(size).model_kwargs)
