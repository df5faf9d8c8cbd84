"""Crash descriptions: allocation failures read as out of memory, whatever raised them."""
from __future__ import annotations

import pytest
import torch

from harness.core.errors import describe_exception


def test_memory_error_is_out_of_memory() -> None:
    assert describe_exception(MemoryError()) == "out of memory (MemoryError)"


def test_cpu_allocator_failure_is_out_of_memory() -> None:
    with pytest.raises(RuntimeError) as caught:
        torch.empty(1 << 60, dtype=torch.uint8)
    assert describe_exception(caught.value).startswith("out of memory (RuntimeError: ")


def test_other_errors_keep_their_type_on_one_line() -> None:
    text = describe_exception(ValueError("bad\nshape " + "x" * 300))
    assert text.startswith("ValueError: bad shape x") and "\n" not in text
    assert len(text) < 220 and text.endswith("…")
