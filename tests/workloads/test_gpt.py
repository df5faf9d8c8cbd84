"""The gpt workload: GPT-2 small's parameter count, FLOPs per token against PaLM's formula at
every size, the layer table, the offline tokenizer (trained once, reused, no network) and the
text windows."""
from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import torch

from harness.commands.cli import main
from workloads import get_workload
from workloads.flops import count_flops_per_sample, count_parameters
from workloads.gpt import text
from workloads.gpt.flops import palm_flops_per_token
from workloads.layers import layer_table

GPT2_SMALL = 124_439_808  # the published 124M model (Hugging Face "gpt2"), lm_head tied


def gpt2_parameters(vocab: int, context: int, layers: int, width: int) -> int:
    """Token and position tables, per block two LayerNorms (2d each), the q/k/v projection
    (3d² + 3d), the output projection (d² + d), the MLP (4d² + 4d and 4d² + d), a final
    LayerNorm; the output projection is the token table."""
    block = 2 * 2 * width + (3 * width**2 + 3 * width) + (width**2 + width) \
        + (4 * width**2 + 4 * width) + (4 * width**2 + width)
    return vocab * width + context * width + layers * block + 2 * width


def test_full_is_gpt2_small_to_the_parameter() -> None:
    workload = get_workload("gpt")
    assert count_parameters(workload, "full") == GPT2_SMALL == gpt2_parameters(50_257, 1024,
                                                                                12, 768)
    model = workload.build_model("tiny")
    assert model.lm_head.weight is model.embed.wte.weight  # tied, counted once


@pytest.mark.parametrize("size", ["tiny", "small", "full"])
def test_training_flops_per_token_agree_with_palm_within_2_percent(size: str) -> None:
    workload = get_workload("gpt")
    kwargs = workload.preset(size).model_kwargs
    per_token = count_flops_per_sample(workload, size) / kwargs["context"]
    formula = palm_flops_per_token(count_parameters(workload, size), kwargs["layers"],
                                   kwargs["width"], kwargs["context"])
    assert per_token == pytest.approx(formula, rel=0.02)
    # The attention term is counted exactly: 12·L·d·T of a full T x T score matrix.
    rows = layer_table(workload, size)
    attention = sum(r.flops for r in rows if r.kind == "CausalAttention") / kwargs["context"]
    assert attention == 12 * kwargs["layers"] * kwargs["width"] * kwargs["context"]
    assert sum(r.flops for r in rows) == count_flops_per_sample(workload, size)
    assert sum(r.parameters for r in rows) == count_parameters(workload, size)


def test_layer_table_holds_attention_and_the_tied_head_once() -> None:
    rows = {r.name: r for r in layer_table("gpt", "tiny")}
    assert rows["blocks.0.attn.attention"].parameters == 0
    assert rows["blocks.0.attn.attention"].forward_flops > 0
    assert rows["lm_head"].parameters == 0 and rows["embed.wte"].parameters == 256 * 128
    assert rows["lm_head"].positions == 32 and rows["lm_head"].out_features == 256
    blocks = [r.block for r in rows.values()]
    assert blocks[0] == "embed" and "blocks.1" in blocks and blocks[-1] == "lm_head"


def test_describe_prints_flops_per_token_and_the_formula(capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    assert main(["describe", "gpt", "--size", "full"]) == 0
    out = capsys.readouterr().out
    assert "124,439,808" in out and "6N + 12·L·d·T" in out and "eval_loss <= 5.9" in out
    assert main(["describe", "gpt", "--size", "tiny", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["tokens_per_sample"] == 32 and 0.98 <= info["counted_over_palm"] <= 1.0


def test_tensor_parallel_needs_whole_heads_and_the_run_names_its_attention_kernel() -> None:
    workload = get_workload("gpt")
    assert workload.tensor_parallel_refusal("tiny", 2) is None
    assert "heads" in (workload.tensor_parallel_refusal("small", 4) or "")
    found = workload.run_settings("tiny", torch.device("cpu"), "fp32")["attention_backend"]
    assert found in ("math", "flash_attention", "efficient_attention")


def test_tiny_reads_bytes_and_windows_are_shifted_by_one() -> None:
    train, evaluation = get_workload("gpt").datasets("tiny", None, 0)
    assert train.inputs.shape[1] == 32 and len(train) == 40_000 // 33
    assert len(evaluation) == 8_000 // 33
    assert torch.equal(train.inputs[:, 1:], train.targets[:, :-1])
    assert int(train.inputs.max()) < 256
    first = bytes(train.inputs[0].tolist()).decode("utf-8")
    assert first == text.corpus(None)[1][:32]


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to open a network connection fails the test."""
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the tokenizer tried to reach the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_the_tokenizer_is_trained_here_once_and_reused(cache_dir: Path, offline: None,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    path = text.tokenizer_path(512)
    assert not path.exists()
    trained = text.load_tokenizer(512)
    assert path.is_file() and path.parent.parent == cache_dir
    assert trained.get_vocab_size() == 512 and trained.token_to_id(text.END_OF_TEXT) == 0
    sentence = "The extended form of the assert statement"
    assert trained.decode(trained.encode(sentence).ids) == sentence
    assert len(trained.encode(sentence).ids) < len(sentence.encode())  # merges learned

    def retrain(*args: object) -> None:
        raise AssertionError("trained again though it was cached")

    monkeypatch.setattr(text, "train_tokenizer", retrain)
    again = text.load_tokenizer(512)
    assert again.encode(sentence).ids == trained.encode(sentence).ids


def test_data_make_writes_the_text_as_token_files(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    import numpy as np

    from workloads.files import check_dataset

    out = tmp_path / "tokens"
    assert main(["data", "make", "-w", "gpt", "--size", "tiny", "--format", "tokens",
                 "--samples", "10", "-o", str(out)]) == 0
    assert "text (" in capsys.readouterr().out
    ids = np.fromfile(out / "tokens.bin", dtype="<i4")
    assert len(ids) == 10 * 32 + 1
    assert bytes(ids.astype(np.uint8)) == text.corpus(None)[1].encode()[:321]
    assert check_dataset(get_workload("gpt"), "tiny", str(out)) == "tokens"
