"""What the CPU backend says it cannot train, before a step fails in oneDNN."""
from __future__ import annotations

import pytest
import torch

import backends.cpu as cpu
from backends.cpu import CPUBackend


@pytest.mark.parametrize(("flags", "precision", "refused"), [
    ({"avx2"}, "bf16", True),              # Zen 1-3: no bf16 LSTM primitive
    ({"avx2", "avx512f"}, "bf16", False),  # AVX-512 CPUs run it
    ({"avx2"}, "fp32", False),
])
def test_bf16_lstm_needs_avx512(monkeypatch: pytest.MonkeyPatch, flags: set[str],
                                precision: str, refused: bool) -> None:
    monkeypatch.setattr(cpu, "cpu_flags", lambda: flags)
    backend = CPUBackend()
    lstm = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.LSTM(4, 4))
    reason = backend.model_unsupported(lstm, precision)
    assert (reason is not None) is refused
    if refused:
        assert "AVX-512" in str(reason)
    assert backend.model_unsupported(torch.nn.Linear(4, 4), "bf16") is None
