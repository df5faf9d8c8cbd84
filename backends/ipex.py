"""Intel Extension for PyTorch as an optional plugin of the cpu backend.

IPEX exits the whole process when imported beside a torch it was not built for, so its version
is read from package metadata and compared before anything imports it.
"""
from __future__ import annotations

import importlib.metadata
from typing import Any

import torch

from backends.base import Availability

DISTRIBUTION = "intel-extension-for-pytorch"


def _major_minor(version: str) -> tuple[int, ...]:
    parts = version.split("+")[0].split(".")[:2]
    return tuple(int(p) for p in parts if p.isdigit())


# IPEX prepacks bf16 weights only with these instructions; without them ipex.optimize(...,
# dtype=torch.bfloat16) stops on an assertion (seen on AMD Zen 3, which has AVX2 only).
BF16_PREPACK_ISA = (("avx512bw", "avx512vl", "avx512dq"), ("avx_ne_convert",))


def bf16_unsupported(flags: frozenset[str] | None = None) -> str | None:
    """Why IPEX cannot train in bf16 on this CPU, or None when it can."""
    if flags is None:
        from harness.machine.hardware import cpu_flags

        flags = cpu_flags()
    if any(all(flag in flags for flag in group) for group in BF16_PREPACK_ISA):
        return None
    return ("IPEX's bf16 weight prepacking needs avx512bw+avx512vl+avx512dq or avx_ne_convert, "
            "which this CPU lacks")


def ipex_availability(torch_version: str | None = None, precision: str = "fp32",
                      flags: frozenset[str] | None = None) -> Availability:
    """Available only when IPEX is installed and built for the installed torch's major.minor
    (and, for bf16, where the CPU has the instructions IPEX's bf16 path asserts)."""
    torch_version = torch_version or torch.__version__
    try:
        ipex_version = importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return Availability.no(f"{DISTRIBUTION} not installed")
    if _major_minor(ipex_version) != _major_minor(torch_version):
        return Availability.no(
            f"{DISTRIBUTION} {ipex_version} is built for torch "
            f"{'.'.join(map(str, _major_minor(ipex_version)))}.*, "
            f"installed torch is {torch_version}"
        )
    if precision == "bf16" and (reason := bf16_unsupported(flags)) is not None:
        return Availability.no(reason)
    return Availability.yes()


def ipex_version() -> str | None:
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None


def ipex_optimize(model: torch.nn.Module, optimizer: Any, precision: str) -> tuple[Any, Any]:
    """Apply ipex.optimize; only called after ipex_availability() said yes."""
    import intel_extension_for_pytorch as ipex  # type: ignore[import-not-found]

    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    return ipex.optimize(model, optimizer=optimizer, dtype=dtype)
