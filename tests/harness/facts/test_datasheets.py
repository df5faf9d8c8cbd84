"""Which precisions a CPU computes natively, as its recorded ISA flags say: a precision it
only emulates (bf16 on AVX2 Zen 1 to 3) is marked wherever a report shows it."""
from __future__ import annotations

import pytest

from harness.facts.datasheets import emulated_precision

ZEN1 = {"arch": "x86_64", "isa_flags": ["avx", "avx2", "f16c", "fma", "sse4_2"]}
ZEN4 = {"arch": "x86_64", "isa_flags": ["avx", "avx2", "avx512_bf16", "avx512f", "fma"]}
SAPPHIRE = {"arch": "x86_64", "isa_flags": ["avx512f", "amx_bf16", "amx_tile", "avx512_fp16"]}
GRAVITON3 = {"arch": "aarch64", "isa_flags": ["asimd", "sve", "bf16", "i8mm"]}


@pytest.mark.parametrize(("machine", "precision", "emulated"), [
    (ZEN1, "bf16", True), (ZEN1, "fp16", True), (ZEN1, "fp32", False),
    (ZEN4, "bf16", False), (ZEN4, "fp16", True),
    (SAPPHIRE, "bf16", False), (SAPPHIRE, "fp16", False),
    (GRAVITON3, "bf16", False), (GRAVITON3, "fp16", False),  # fp16 flags not recorded
    ({**GRAVITON3, "isa_flags": ["asimd"]}, "bf16", True),
    ({"arch": "x86_64"}, "bf16", False),  # no flags recorded: never claimed
    ({"arch": "x86_64", "isa_flags": []}, "bf16", False),
    ({**ZEN1, "arch": "riscv64"}, "bf16", False),
])
def test_a_precision_is_emulated_only_where_the_flags_say_so(
        machine: dict, precision: str, emulated: bool) -> None:
    assert emulated_precision(machine, precision) is emulated
