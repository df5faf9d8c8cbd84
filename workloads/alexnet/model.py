"""AlexNet as torchvision defines it (Krizhevsky 2014, one-GPU variant); keys match torchvision."""
from __future__ import annotations

import torch
from torch import nn


class AlexNet(nn.Module):
    """Five convolutions and three fully connected layers; `width` scales every layer."""

    def __init__(self, num_classes: int = 1000, width: float = 1.0, dropout: float = 0.5) -> None:
        super().__init__()
        c1, c2, c3, c4, fc = (max(1, int(n * width)) for n in (64, 192, 384, 256, 4096))
        self.features = nn.Sequential(
            nn.Conv2d(3, c1, kernel_size=11, stride=4, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(c1, c2, kernel_size=5, padding=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
            nn.Conv2d(c2, c3, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(c3, c4, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.Conv2d(c4, c4, kernel_size=3, padding=1),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2),
        )
        self.avgpool = nn.AdaptiveAvgPool2d((6, 6))
        self.classifier = nn.Sequential(
            nn.Dropout(p=dropout),
            nn.Linear(c4 * 6 * 6, fc),
            nn.ReLU(inplace=True),
            nn.Dropout(p=dropout),
            nn.Linear(fc, fc),
            nn.ReLU(inplace=True),
            nn.Linear(fc, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))
