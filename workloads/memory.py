"""How much memory training a workload takes, estimated on the meta device (no allocation):
parameters, gradients and optimizer state, and the activations autograd saves for backward."""
from __future__ import annotations

import hashlib
import inspect
import json
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from harness.core.files import cache_dir, write_atomic

if TYPE_CHECKING:
    from workloads.base import Workload

# Bytes per parameter held by a data-parallel rank: fp32 weight, gradient and SGD momentum.
STATE_BYTES_PER_PARAMETER = 12
_PROBE_BATCH = 2


def _saved_bytes(workload: Workload, model: torch.nn.Module, size: str, batch: int) -> int:
    saved = 0

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal saved
        saved += tensor.numel() * tensor.element_size()
        return tensor

    inputs, targets = workload.synthetic_batch(size, batch, "meta")
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        workload.loss(model(inputs), targets)
    return saved


def _source_hash(workload_class: type[Workload]) -> str:
    """The source the model is built from (the workload's folder and the shared modules of
    workloads/): a changed model is probed again."""
    folders = {Path(inspect.getfile(workload_class)).parent, Path(__file__).parent}
    digest = hashlib.sha256()
    for path in sorted(p for folder in folders for p in folder.glob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


@lru_cache(maxsize=64)
def _per_sample(workload_class: type[Workload], size: str) -> tuple[int, int]:
    """(parameter count, bytes of tensors saved for backward per sample), kept in the cache
    folder: the first forward on the meta device costs about 2 s of kernel registration in
    each process, a lookup none.

    Autograd also saves weights (views of the parameters, not new memory): the difference
    between two batch sizes leaves only what grows with the batch."""
    key = f"{workload_class.__name__}|{size}|{torch.__version__}|{_source_hash(workload_class)}"
    path = cache_dir() / "memory.json"
    table = _read_table(path)
    try:
        parameters, activations = table[key]
        return int(parameters), int(activations)
    except (KeyError, TypeError, ValueError):
        pass
    found = _probe(workload_class, size)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        table = _read_table(path)  # another process may have added entries meanwhile
        table[key] = list(found)
        write_atomic(path, json.dumps(table, indent=1, sort_keys=True))
    except (OSError, TypeError):
        pass  # an unwritable cache only costs the probe again
    return found


def _read_table(path: Path) -> dict:
    try:
        table = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return table if isinstance(table, dict) else {}


def _probe(workload_class: type[Workload], size: str) -> tuple[int, int]:
    workload = workload_class()
    with torch.device("meta"):
        model = workload.build_model(size)
    model.train()
    small = _saved_bytes(workload, model, size, _PROBE_BATCH)
    large = _saved_bytes(workload, model, size, 2 * _PROBE_BATCH)
    parameters = sum(p.numel() for p in model.parameters())
    return parameters, max(0, large - small) // _PROBE_BATCH


def training_bytes(workload: Workload, size: str, batch: int) -> int:
    """Estimated bytes one rank holds while training at `batch` samples per step (fp32):
    parameters, gradients and momentum, plus the activations saved for backward. An estimate
    for refusing runs that cannot fit, not a measurement (peak_memory is)."""
    parameters, activations = _per_sample(type(workload), size)
    return parameters * STATE_BYTES_PER_PARAMETER + activations * batch
