"""The HEP signal/background classifier of Kurth et al. 2017 (NERSC hep_cnn_benchmark)."""
from __future__ import annotations

import torch
from torch import nn


class HEPCNN(nn.Module):
    """4 x [conv 3x3 + bias, ReLU, max-pool 2x2, dropout], conv 3x3 + ReLU, global avg pool, FC."""

    def __init__(self, in_channels: int = 3, filters: int = 128, num_classes: int = 2,
                 dropout: float = 0.5) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        channels = in_channels
        for _ in range(4):
            layers += [
                nn.Conv2d(channels, filters, 3, padding=1),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(2),
                nn.Dropout(dropout),
            ]
            channels = filters
        layers += [nn.Conv2d(filters, filters, 3, padding=1), nn.ReLU(inplace=True)]
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(filters, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.features(x)), 1))
