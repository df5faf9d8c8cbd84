"""The physics-motivated calorimeter image generator behind the HEP CNN's time-to-train runs."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from workloads.hep_cnn.generator import (
    calorimeter_energies,
    calorimeter_images,
    hep_datasets,
    to_network_input,
)


def _best_threshold_accuracy(score: torch.Tensor, labels: torch.Tensor) -> float:
    """Accuracy of the best cut `score > t -> signal`, chosen on the same sample (optimistic)."""
    ordered = labels[torch.argsort(score)].numpy()
    signal_below = np.concatenate([[0], np.cumsum(ordered)])
    background_below = np.arange(len(ordered) + 1) - signal_below
    correct = background_below + (ordered.sum() - signal_below)
    return float(correct.max() / len(ordered))


@pytest.fixture(scope="module")
def events() -> tuple[torch.Tensor, torch.Tensor]:
    return calorimeter_energies(2048, 32, seed=11)


def test_shapes_dtypes_and_labels(events) -> None:
    raw, labels = events
    assert raw.shape == (2048, 3, 32, 32) and raw.dtype == torch.float32
    assert labels.shape == (2048,) and labels.dtype == torch.int64
    assert int(labels.sum()) == 1024 and set(labels.tolist()) == {0, 1}
    assert raw.min() >= 0 and torch.isfinite(raw).all()
    tracks = raw[:, 2]
    assert torch.equal(tracks, tracks.round())


def test_signal_fraction_is_exact() -> None:
    _, labels = calorimeter_energies(100, 16, seed=0, signal_fraction=0.3)
    assert int(labels.sum()) == 30


def test_deterministic_by_seed() -> None:
    first, first_labels = calorimeter_images(64, 16, seed=5)
    again, again_labels = calorimeter_images(64, 16, seed=5)
    other, _ = calorimeter_images(64, 16, seed=6)
    assert torch.equal(first, again) and torch.equal(first_labels, again_labels)
    assert not torch.equal(first, other)


def test_signal_has_more_energy_and_tracks(events) -> None:
    raw, labels = events
    ht = raw[:, :2].sum(dim=(1, 2, 3))
    tracks = raw[:, 2].sum(dim=(1, 2))
    signal, background = labels == 1, labels == 0
    assert ht[signal].median() > 1.2 * ht[background].median()
    assert tracks[signal].median() > tracks[background].median()


def test_ht_alone_neither_trivial_nor_hopeless(events) -> None:
    raw, labels = events
    accuracy = _best_threshold_accuracy(raw[:, :2].sum(dim=(1, 2, 3)), labels)
    assert 0.65 < accuracy < 0.92


def test_background_leading_jets_are_back_to_back(events) -> None:
    raw, labels = events
    phi_profile = raw[:, :2].sum(dim=(1, 2))  # energy per phi column
    peak = phi_profile.argmax(dim=1)
    size = phi_profile.shape[1]
    opposite = (peak + size // 2) % size
    window = torch.stack([phi_profile[torch.arange(len(raw)), (opposite + d) % size]
                          for d in range(-3, 4)]).sum(0)
    share = window / phi_profile.sum(dim=1)
    assert share[labels == 0].median() > share[labels == 1].median()


def test_phi_wraps_around() -> None:
    raw, _ = calorimeter_energies(512, 32, seed=3)
    edge_energy = raw[:, :2, :, [0, -1]].sum(dim=(1, 2))
    both_edges = (edge_energy > 20.0).all(dim=1)
    assert both_edges.any()  # showers split across phi = +-pi light up both edge columns


def test_network_input_is_standardised(events) -> None:
    raw, _ = events
    images = to_network_input(raw)
    assert images.dtype == torch.float32 and images.shape == raw.shape
    assert torch.allclose(images.mean(dim=(0, 2, 3)), torch.zeros(3), atol=0.15)
    assert torch.allclose(images.std(dim=(0, 2, 3)), torch.ones(3), atol=0.15)
    assert torch.equal(raw, calorimeter_energies(2048, 32, seed=11)[0])  # input untouched


def test_hep_datasets_use_independent_seeds() -> None:
    train, evaluation = hep_datasets(16, 128, 64, seed=0)
    assert train.inputs.shape == (128, 3, 16, 16) and evaluation.inputs.shape == (64, 3, 16, 16)
    assert int(train.targets.sum()) == 64 and int(evaluation.targets.sum()) == 32
    assert not torch.equal(train.inputs[:64], evaluation.inputs)
    again, _ = hep_datasets(16, 128, 64, seed=0)
    assert torch.equal(train.inputs, again.inputs)


def test_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        calorimeter_energies(0, 32, seed=0)
    with pytest.raises(ValueError):
        calorimeter_energies(10, 32, seed=0, signal_fraction=1.5)
