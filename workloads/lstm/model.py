"""Word-level LSTM language model (Zaremba et al. 2014), untied embedding and decoder."""
from __future__ import annotations

import torch
from torch import nn


class LSTMLanguageModel(nn.Module):
    """Embedding, a stacked LSTM and a linear decoder over the vocabulary, with dropout between."""

    def __init__(self, vocab_size: int = 10_000, embedding: int = 650, hidden: int = 650,
                 layers: int = 2, dropout: float = 0.5) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.embedding = nn.Embedding(vocab_size, embedding)
        self.drop = nn.Dropout(dropout)
        self.lstm = nn.LSTM(embedding, hidden, num_layers=layers, dropout=dropout, batch_first=True)
        self.decoder = nn.Linear(hidden, vocab_size)
        for weight in (self.embedding.weight, self.decoder.weight):
            nn.init.uniform_(weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits of shape (batch, seq, vocab) for next-token prediction."""
        out, _ = self.lstm(self.drop(self.embedding(tokens)))
        return self.decoder(self.drop(out))
