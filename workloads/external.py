"""Models read for their facts only: any torchvision classification model by name,
`torchvision:NAME` (vgg16, inception_v3, resnet101, ...), for `dtbench describe` and
`dtbench predict`. Their parameters, FLOPs per sample and layer order (the order their
gradients appear in) are counted from the model itself on the meta device, as the seed
workloads' are (workloads/layers.py). Training runs the four seed workloads only.
"""
from __future__ import annotations

import difflib
import importlib
import importlib.util
import sys
import types
from functools import lru_cache
from typing import Any

import torch
from torch import nn

from harness.core.errors import UnknownNameError, UsageError

PREFIX = "torchvision:"
DEFAULT_CROP = 224
EXAMPLES = ("vgg16", "inception_v3", "resnet101", "resnet50", "alexnet", "densenet121")


def is_external(name: str) -> bool:
    return name.lower().startswith(PREFIX)


def import_torchvision(module: str = "models") -> Any:
    """torchvision.<module> (models, transforms.v2). The wheel on the package index is built
    against torch's CUDA build: beside a CPU-only torch its compiled operators (nms,
    roi_align, ...) cannot load and the package's own __init__ then fails registering kernels
    for them. Models and transforms are plain Python and use none of those operators, so
    where that happens they are imported without running the package's __init__."""
    try:
        return importlib.import_module(f"torchvision.{module}")
    except ImportError:
        raise UsageError("torchvision is not installed: pip install torchvision (the release "
                         "matching your torch)") from None
    except RuntimeError:
        for key in [key for key in sys.modules if key.split(".")[0] == "torchvision"]:
            del sys.modules[key]
        spec = importlib.util.find_spec("torchvision")
        if spec is None or spec.submodule_search_locations is None:
            raise UsageError("torchvision cannot be imported") from None
        package = types.ModuleType("torchvision")
        package.__path__ = list(spec.submodule_search_locations)
        package.__spec__ = spec
        sys.modules["torchvision"] = package
        return importlib.import_module(f"torchvision.{module}")


def _import_models() -> Any:
    return import_torchvision("models")


@lru_cache(maxsize=1)
def available() -> tuple[str, ...]:
    """The classification models torchvision builds by name."""
    models = _import_models()
    return tuple(sorted(models.list_models(module=models)))


def model_name(name: str) -> str:
    """NAME of `torchvision:NAME`, checked; UnknownNameError (exit 2) otherwise."""
    bare = name[len(PREFIX):].strip().lower() if is_external(name) else name.strip().lower()
    if bare not in available():
        close = difflib.get_close_matches(bare, available(), n=4)
        raise UnknownNameError(
            f"unknown torchvision model {bare!r}; "
            + (f"did you mean {', '.join(close)}? " if close else "")
            + f"e.g. {', '.join(EXAMPLES)} ({len(available())} classification models)")
    return bare


def crop_size(name: str) -> int:
    """The input side the model's published weights are evaluated at (inception_v3: 299),
    224 where they say nothing."""
    models = _import_models()
    try:
        weights = models.get_model_weights(name).DEFAULT
        return int(getattr(weights.transforms, "keywords", {}).get("crop_size", DEFAULT_CROP))
    except (ValueError, AttributeError, TypeError):
        return DEFAULT_CROP


def build(name: str) -> tuple[nn.Module, tuple[int, int, int], int]:
    """(model on the meta device in training mode, input shape per sample, classes)."""
    bare = model_name(name)
    models = _import_models()
    extra = {"init_weights": False} if bare in ("inception_v3", "googlenet") else {}
    with torch.device("meta"):
        model = models.get_model(bare, weights=None, **extra)
    side = crop_size(bare)
    classes = getattr(model, "num_classes", None) or 1000
    return model.train(), (3, side, side), int(classes)
