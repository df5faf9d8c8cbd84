"""The language model's text, offline: English text shipped with Python (the documentation
topics of `pydoc_data`, as the lstm workload reads them) or the user's UTF-8 text, tokenized
by a byte-level BPE that Hugging Face `tokenizers` trains here, on the training split of the
built-in text, to the model's vocabulary; at a vocabulary of 256 the tokens are the UTF-8
bytes themselves.

A trained tokenizer is one JSON file in dtbench's cache folder, named by its vocabulary and a
hash of the text and settings it was trained on: trained once (under a file lock, so ranks
starting together train it once between them) and read back by every later run. Nothing is
downloaded. The last tenth of the text, cut at a line, is held out for validation.
"""
from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.core.errors import UsageError
from harness.core.files import cache_dir, write_atomic
from workloads.base import Dataset

BYTE_VOCABULARY = 256
EVAL_FRACTION = 0.1
END_OF_TEXT = "<|endoftext|>"
# Part of every cached tokenizer's name: a change of the settings below trains a new one.
TOKENIZER_SETTINGS = "byte-level BPE v1, min_frequency 2, no prefix space"
BUILTIN_SOURCE = "Python documentation topics (pydoc_data)"


def corpus(data_path: str | None) -> tuple[str, str]:
    """(where the text is from, the text): the built-in topics, or the user's --data file."""
    if data_path is None:
        from workloads.data import builtin_text

        return BUILTIN_SOURCE, builtin_text()
    from workloads.data import _read_text

    return data_path, _read_text(data_path, 2**30)


def split_text(text: str, eval_fraction: float = EVAL_FRACTION) -> tuple[str, str]:
    """(training text, held-out text): the last `eval_fraction` of the characters, from the
    start of a line."""
    cut = text.rfind("\n", 0, int(len(text) * (1 - eval_fraction))) + 1
    return text[:cut], text[cut:]


def tokenizer_path(vocab_size: int) -> Path:
    """The cached tokenizer of this vocabulary, trained on the built-in training text."""
    train, _ = split_text(corpus(None)[1])
    digest = hashlib.sha256(f"{TOKENIZER_SETTINGS}\n{train}".encode()).hexdigest()[:16]
    return cache_dir() / "tokenizers" / f"gpt-bpe-{vocab_size}-{digest}.json"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock beside `path` (POSIX advisory lock; none where fcntl is absent)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    with open(path.with_suffix(".lock"), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _import_tokenizers() -> Any:
    try:
        import tokenizers
    except ImportError:
        raise UsageError("gpt's tokenizer needs Hugging Face tokenizers: pip install "
                         "tokenizers") from None
    return tokenizers


def train_tokenizer(text: str, vocab_size: int) -> Any:
    """A byte-level BPE trained on `text` up to `vocab_size` tokens (fewer where the text has
    no more pairs to merge); token 0 is the end-of-text marker, the 256 bytes follow."""
    tokenizers = _import_tokenizers()
    from tokenizers import decoders, models, pre_tokenizers, trainers

    found = tokenizers.Tokenizer(models.BPE())
    found.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    found.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2,
                                  special_tokens=[END_OF_TEXT], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    found.train_from_iterator(text.splitlines(keepends=True), trainer=trainer)
    return found


def load_tokenizer(vocab_size: int) -> Any:
    """The cached tokenizer of `vocab_size`, trained now if there is none."""
    tokenizers = _import_tokenizers()
    path = tokenizer_path(vocab_size)
    with _locked(path):
        if not path.is_file():
            train, _ = split_text(corpus(None)[1])
            write_atomic(path, train_tokenizer(train, vocab_size).to_str())
    return tokenizers.Tokenizer.from_file(str(path))


def encode(text: str, vocab_size: int) -> np.ndarray:
    """Token ids (int64) of `text`: its UTF-8 bytes at a vocabulary of 256, else the cached
    BPE's tokens."""
    if vocab_size == BYTE_VOCABULARY:
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64)
    return np.asarray(load_tokenizer(vocab_size).encode(text).ids, dtype=np.int64)


def windows(ids: np.ndarray, context: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Non-overlapping windows of context + 1 ids: (inputs, next-token targets)."""
    count = len(ids) // (context + 1)
    cut = torch.from_numpy(ids[:count * (context + 1)].copy()).view(count, context + 1)
    return cut[:, :-1].contiguous(), cut[:, 1:].contiguous()


def token_datasets(vocab_size: int, context: int, data_path: str | None,
                   train_tokens: int | None = None, eval_tokens: int | None = None,
                   ) -> tuple[Dataset, Dataset]:
    """(train, validation) windows of the text, tokenized for `vocab_size`; at most the first
    train_tokens / eval_tokens of each split where given."""
    source, text = corpus(data_path)
    kind = "UTF-8 bytes" if vocab_size == BYTE_VOCABULARY else f"byte-level BPE ({vocab_size})"
    found = []
    for name, part, limit in zip(("train", "validation"), split_text(text),
                                 (train_tokens, eval_tokens), strict=True):
        ids = encode(part, vocab_size)[:limit]
        inputs, targets = windows(ids, context)
        if len(inputs) == 0:
            raise UsageError(f"{source}: its {name} text has {len(ids)} tokens, fewer than one "
                             f"window of {context + 1}; give more text")
        found.append(Dataset(inputs, targets, f"{source} {name}: {len(ids):,} tokens ({kind}), "
                                              f"{len(inputs)} windows of {context}"))
    return found[0], found[1]


def token_ids(vocab_size: int) -> np.ndarray:
    """The whole built-in text as token ids (`dtbench data make --format tokens`)."""
    return encode(corpus(None)[1], vocab_size)


