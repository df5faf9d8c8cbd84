"""The HEP CNN of "Deep Learning at 15PF" (594,178 parameters at full size)."""
from __future__ import annotations

from torch import nn

from workloads.base import WORKLOADS, Dataset, Preset, QualityTarget
from workloads.classification import ImageClassification
from workloads.hep_cnn.model import HEPCNN

PRESETS = {
    "tiny": Preset(
        model_kwargs={"filters": 16}, input_shape=(3, 32, 32), num_classes=2,
        batch_size={"cpu": 16, "cuda": 128}, steps=5, warmup=1, lr=0.02,
        target=QualityTarget("accuracy", 0.7, True, max_epochs=10),
        data="generated calorimeter images 32x32", notes="16 filters",
        extra={"n_train": 2048, "n_eval": 512}),
    "small": Preset(
        model_kwargs={"filters": 64}, input_shape=(3, 64, 64), num_classes=2,
        batch_size={"cpu": 32, "cuda": 256}, steps=15, warmup=3, lr=0.01,
        target=QualityTarget("accuracy", 0.90, True, max_epochs=8),
        data="generated calorimeter images 64x64", notes="64 filters, 64x64 input",
        extra={"n_train": 8192, "n_eval": 2048}),
    "full": Preset(
        model_kwargs={}, input_shape=(3, 224, 224), num_classes=2,
        batch_size={"cpu": 16, "cuda": 128}, steps=20, warmup=5, lr=0.01,
        target=QualityTarget("accuracy", 0.90, True, max_epochs=8),
        data="generated calorimeter images 224x224, or --data",
        notes="128 filters as in Kurth et al. 2017; the built-in set takes ~3 GB",
        extra={"n_train": 4096, "n_eval": 1024}),
}


@WORKLOADS.register("hep_cnn")
class HEPCNNWorkload(ImageClassification):
    """Signal/background classification of calorimeter images; quality is accuracy and AUC."""

    name = "hep_cnn"
    summary = "HEP CNN (Kurth et al. 2017), 224x224x3 calorimeter images, 2 classes"
    presets = PRESETS

    def build_model(self, size: str) -> nn.Module:
        return HEPCNN(**self.preset(size).model_kwargs)

    def datasets(self, size: str, data_path: str | None, seed: int) -> tuple[Dataset, Dataset]:
        from workloads.data import load_image_arrays
        from workloads.hep_cnn.generator import hep_datasets

        preset = self.preset(size)
        if data_path:
            return load_image_arrays(data_path, preset.input_shape[-1], 3, preset.num_classes)
        return hep_datasets(preset.input_shape[-1], preset.extra["n_train"],
                            preset.extra["n_eval"], seed)
