"""Signal/background calorimeter images for the HEP CNN (Kurth et al. 2017).

The benchmark separates R-parity-violating SUSY events, in which a pair of heavy gluinos
each decay to three or more quarks (g~ -> qqq directly, or g~ -> qq chi0 -> qq qqq via a
neutralino), from the QCD multijet background that dominates the same all-hadronic
final state. Events are pictured in the detector's (eta, phi) plane, |eta| < 2.5 along
the rows and phi in [-pi, pi) along the columns, with three channels: electromagnetic
calorimeter transverse energy, hadronic calorimeter transverse energy and the number of
charged-particle tracks.

Physics modelled here, per event:
- Background (QCD 2 -> 2 plus radiation): mostly 2-4 jets; the leading pT follows the
  steeply falling dsigma/dpT ~ pT^-5 spectrum above a trigger-like threshold; the leading
  pair is balanced and back-to-back in phi; extra jets are final-state radiation near a
  leading jet or isotropic initial-state radiation; jets are mostly gluon-initiated.
- Signal: a gluino pair at one of a few benchmark masses, each gluino's energy shared
  (Dirichlet) among 3-5 partons emitted isotropically: typically 6-10 harder, more
  isotropic, mostly quark-initiated jets with a larger scalar sum of jet pT (HT).
- Every jet deposits a 2-D Gaussian shower (phi periodic, integrated exactly over each
  pixel) split into EM and hadronic parts by a per-jet EM fraction, smeared with the
  calorimeters' stochastic resolution; hadronic showers are wider, gluon jets wider and
  richer in tracks (charged multiplicity grows with log of the charged energy).
- Pile-up: a Poisson number of soft minimum-bias particles per extra interaction, flat in
  (eta, phi), exponential in pT; charged ones above 1 GeV also leave tracks.
- Electronic noise: cells are read out above a 2-sigma zero-suppression threshold, so
  shower tails below it vanish and 2.3% of empty cells show a noise hit from the
  Gaussian tail (drawn sparsely, which keeps large images cheap).

The classes overlap on purpose: HT alone separates them to only about 80%, so the jet
multiplicity, topology and substructure left for the CNN to learn matter. Network input
is log(1 + E) per pixel, normalised per channel with fixed reference statistics so that
every split and sample count sees the same scaling.
"""
from __future__ import annotations

import functools
import math

import numpy as np
import torch

from workloads.base import Dataset

ETA_MAX = 2.5
MAX_JETS = 12
CHUNK_EVENTS = 2048

BACKGROUND_JET_COUNTS = (2, 3, 4, 5, 6)
BACKGROUND_JET_PROBS = (0.30, 0.33, 0.20, 0.11, 0.06)
QCD_PT_INDEX = 5.0
QCD_LEADING_PT_MIN = 550.0
RADIATION_PT_MIN = 20.0
BACKGROUND_GLUON_FRACTION = 0.7

GLUINO_MASSES = (1000.0, 1200.0, 1400.0)
PARTONS_PER_GLUINO = (3, 4, 5)
PARTONS_PER_GLUINO_PROBS = (0.45, 0.30, 0.25)
SIGNAL_GLUON_FRACTION = 0.15

MEAN_PILEUP = 25.0
PARTICLES_PER_INTERACTION = 25.0
PILEUP_MEAN_PT = 0.5
TRACK_PT_MIN = 1.0
EM_NOISE_GEV = 0.05
HAD_NOISE_GEV = 0.10
REFERENCE_SEED = 20170101
REFERENCE_EVENTS = 256


def _background_jets(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    """QCD multijet: balanced back-to-back leading pair plus softer radiation."""
    n_jets = rng.choice(BACKGROUND_JET_COUNTS, size=n, p=BACKGROUND_JET_PROBS)
    pt = np.zeros((n, MAX_JETS))
    eta = np.zeros((n, MAX_JETS))
    phi = np.zeros((n, MAX_JETS))
    pt[:, 0] = QCD_LEADING_PT_MIN * rng.random(n) ** (-1.0 / (QCD_PT_INDEX - 1.0))
    pt[:, 1] = pt[:, 0] * rng.beta(8.0, 1.5, size=n)
    for k in range(2, MAX_JETS):
        pt[:, k] = RADIATION_PT_MIN + (pt[:, k - 1] - RADIATION_PT_MIN) * rng.uniform(0.2, 0.7, n)
    valid = np.arange(MAX_JETS)[None, :] < n_jets[:, None]
    pt = np.where(valid, pt, 0.0)

    boost = rng.normal(0.0, 0.8, n)
    eta[:, :2] = boost[:, None] + rng.normal(0.0, 0.9, (n, 2))
    phi[:, 0] = rng.uniform(-np.pi, np.pi, n)
    recoil = pt[:, 2:].sum(axis=1) / pt[:, 0]
    phi[:, 1] = phi[:, 0] + np.pi + rng.normal(0.0, 1.0, n) * (0.08 + 0.6 * recoil)
    parent = rng.integers(0, 2, (n, MAX_JETS - 2))
    final_state = rng.random((n, MAX_JETS - 2)) < 0.6
    near_eta = np.take_along_axis(eta[:, :2], parent, axis=1) + rng.normal(0, 0.6, parent.shape)
    near_phi = np.take_along_axis(phi[:, :2], parent, axis=1) + rng.normal(0, 0.6, parent.shape)
    eta[:, 2:] = np.where(final_state, near_eta, rng.normal(0.0, 1.6, parent.shape))
    phi[:, 2:] = np.where(final_state, near_phi, rng.uniform(-np.pi, np.pi, parent.shape))
    gluon = rng.random((n, MAX_JETS)) < BACKGROUND_GLUON_FRACTION
    return {"pt": pt, "eta": eta, "phi": phi, "gluon": gluon}


def _signal_jets(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    """Gluino pair: each gluino's energy shared among 3-5 isotropic partons."""
    mass = rng.choice(GLUINO_MASSES, size=n)
    counts = rng.choice(PARTONS_PER_GLUINO, size=(n, 2), p=PARTONS_PER_GLUINO_PROBS)
    slots = MAX_JETS // 2
    lorentz_gamma = 1.0 + rng.exponential(0.15, (n, 2))
    shares = rng.gamma(1.5, size=(n, 2, slots)) * (np.arange(slots) < counts[..., None])
    shares /= shares.sum(axis=2, keepdims=True)
    energy = (mass[:, None] * lorentz_gamma)[..., None] * shares
    cos_theta = rng.uniform(-1.0, 1.0, (n, 2, slots))
    pt = (energy * np.sqrt(1.0 - cos_theta**2)).reshape(n, MAX_JETS)
    eta = (np.arctanh(np.clip(cos_theta, -0.999999, 0.999999))
           + rng.normal(0.0, 0.5, (n, 1, 1))).reshape(n, MAX_JETS)
    phi = rng.uniform(-np.pi, np.pi, (n, MAX_JETS))
    gluon = rng.random((n, MAX_JETS)) < SIGNAL_GLUON_FRACTION
    return {"pt": pt, "eta": eta, "phi": phi, "gluon": gluon}


def _sqrt_gev(energy: np.ndarray) -> np.ndarray:
    return np.sqrt(np.maximum(energy, 1e-3))


def _shower_fractions(rng: np.random.Generator, jets: dict[str, np.ndarray]) -> None:
    """Per-jet EM/charged fractions, measured energies and shower widths, added in place."""
    shape = jets["pt"].shape
    pt = jets["pt"]
    em_fraction = rng.beta(3.0, 6.0, shape)
    charged_fraction = rng.beta(6.0, 4.0, shape)
    em, had = pt * em_fraction, pt * (1.0 - em_fraction)
    em_resolution = np.hypot(0.10 / _sqrt_gev(em), 0.01)
    had_resolution = np.hypot(0.50 / _sqrt_gev(had), 0.03)
    jets["em"] = np.maximum(em * (1.0 + em_resolution * rng.standard_normal(shape)), 0.0)
    jets["had"] = np.maximum(had * (1.0 + had_resolution * rng.standard_normal(shape)), 0.0)
    width = (0.04 + 0.6 / _sqrt_gev(pt)) * np.where(jets["gluon"], 1.3, 1.0)
    jets["width"] = np.minimum(width, 0.4)
    multiplicity = 2.2 * np.log1p(pt * charged_fraction / 2.0) * np.where(jets["gluon"], 1.5, 1.0)
    jets["tracks"] = rng.poisson(np.where(pt > 0, multiplicity, 0.0))


def _edge_offsets(centre: torch.Tensor, size: int, periodic: bool) -> torch.Tensor:
    """Signed distance from each jet axis to each pixel edge, phi wrapped: (n, J, size + 1)."""
    low, high = (-math.pi, math.pi) if periodic else (-ETA_MAX, ETA_MAX)
    edges = torch.linspace(low, high, size + 1, dtype=torch.float32)
    offsets = edges - centre[..., None]
    if periodic:
        offsets.add_(math.pi).remainder_(2 * math.pi).sub_(math.pi)
    return offsets


def _profiles(offsets: torch.Tensor, width: torch.Tensor) -> torch.Tensor:
    """Fraction of each jet's Gaussian shower falling in each pixel: (n, J, size).

    Along phi one bin per jet straddles the wrap-around point opposite the jet; its
    difference comes out negative and is clipped to the (negligible) zero it should be.
    """
    cdf = torch.erf(offsets / (width[..., None] * math.sqrt(2.0)))
    return (cdf[..., 1:] - cdf[..., :-1]).clamp_(min=0.0).mul_(0.5)


def _add_jet_showers(out: torch.Tensor, jets: dict[str, np.ndarray], start: int) -> None:
    """EM and hadronic showers of a chunk of events: sum over jets of energy x eta x phi."""
    stop, size = start + out.shape[0], out.shape[-1]
    part = {key: torch.from_numpy(np.ascontiguousarray(value[start:stop], dtype=np.float32))
            for key, value in jets.items() if key in ("eta", "phi", "width", "em", "had")}
    eta_offsets = _edge_offsets(part["eta"], size, periodic=False)
    phi_offsets = _edge_offsets(part["phi"], size, periodic=True)
    for channel, name, spread in ((0, "em", 0.7), (1, "had", 1.2)):
        width = part["width"] * spread
        along_eta = _profiles(eta_offsets, width).mul_(part[name][..., None])
        out[:, channel] += torch.bmm(along_eta.transpose(1, 2), _profiles(phi_offsets, width))


def _jet_track_pixels(rng: np.random.Generator, jets: dict[str, np.ndarray], start: int,
                      stop: int, size: int) -> np.ndarray:
    """Pixels (event * S * S + row * S + column) hit by tracks scattered around jet axes."""
    counts = jets["tracks"][start:stop]
    event, jet = np.nonzero(counts)
    repeat = counts[event, jet]
    event, jet = np.repeat(event, repeat), np.repeat(jet, repeat)
    spread = 0.8 * jets["width"][start:stop][event, jet]
    eta = jets["eta"][start:stop][event, jet] + spread * rng.standard_normal(len(event))
    phi = jets["phi"][start:stop][event, jet] + spread * rng.standard_normal(len(event))
    inside = np.abs(eta) < ETA_MAX
    row = ((eta[inside] + ETA_MAX) / (2 * ETA_MAX) * size).astype(np.int64).clip(0, size - 1)
    col = (np.remainder(phi[inside] + np.pi, 2 * np.pi) / (2 * np.pi) * size).astype(np.int64)
    return event[inside] * size * size + row * size + col.clip(0, size - 1)


def _sparse_hits(rng: np.random.Generator, events: int, size: int,
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pile-up particles and noise-only cells above threshold as (event, channel, pixel) hits.

    Returns flat indices into an (events, 3, S*S) block, the values to add there, and the
    (event * S * S + pixel) indices of charged pile-up particles above the track pT cut.
    """
    pixels = size * size
    interactions = rng.poisson(MEAN_PILEUP, events)
    particles = rng.poisson(interactions * PARTICLES_PER_INTERACTION)
    event = np.repeat(np.arange(events), particles)
    pixel = rng.integers(0, pixels, len(event))
    pt = rng.exponential(PILEUP_MEAN_PT, len(event)).astype(np.float32)
    kind = rng.random(len(event))
    charged = kind < 0.6
    tracked = charged & (pt > TRACK_PT_MIN)
    channel = np.where((kind >= 0.6) & (kind < 0.85), 0, 1)
    # Gaussian noise beyond a 2-sigma zero-suppression threshold: 2.28% of cells survive.
    flat, values = [event * 3 * pixels + channel * pixels + pixel], [pt]
    for noisy_channel, sigma in ((0, EM_NOISE_GEV), (1, HAD_NOISE_GEV)):
        cells = rng.integers(0, events * pixels, rng.binomial(events * pixels, 0.0228))
        tail = sigma * (2.0 + rng.exponential(1.0 / 2.37, len(cells)))
        flat.append(cells // pixels * 3 * pixels + noisy_channel * pixels + cells % pixels)
        values.append(tail.astype(np.float32))
    return np.concatenate(flat), np.concatenate(values), event[tracked] * pixels + pixel[tracked]


def calorimeter_energies(n: int, image_size: int, seed: int, signal_fraction: float = 0.5,
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """Raw events: float32 (n, 3, S, S) of EM ET [GeV], hadronic ET [GeV], track counts; labels."""
    if n < 1 or image_size < 2 or not 0.0 <= signal_fraction <= 1.0:
        raise ValueError(f"need n >= 1, image_size >= 2 and 0 <= signal_fraction <= 1, "
                         f"got {n}, {image_size}, {signal_fraction}")
    rng = np.random.default_rng(seed)
    n_signal = int(round(n * signal_fraction))
    labels = rng.permutation(np.arange(n) < n_signal).astype(np.int64)
    signal, background = _signal_jets(rng, n), _background_jets(rng, n)
    jets = {key: np.where(labels[:, None] == 1, signal[key], background[key]) for key in signal}
    _shower_fractions(rng, jets)

    size, pixels = image_size, image_size * image_size
    raw = torch.zeros((n, 3, size, size), dtype=torch.float32)
    for start in range(0, n, CHUNK_EVENTS):
        stop = min(n, start + CHUNK_EVENTS)
        chunk = raw[start:stop]
        _add_jet_showers(chunk, jets, start)
        flat = chunk.view(-1)
        for channel, sigma in ((0, EM_NOISE_GEV), (1, HAD_NOISE_GEV)):
            cells = chunk[:, channel]
            cells.masked_fill_(cells < 2.0 * sigma, 0.0)
        hits, energy, charged = _sparse_hits(rng, stop - start, size)
        flat.index_add_(0, torch.from_numpy(hits), torch.from_numpy(energy))
        tracks = np.concatenate([charged, _jet_track_pixels(rng, jets, start, stop, size)])
        tracks = tracks // pixels * 3 * pixels + 2 * pixels + tracks % pixels
        flat.index_add_(0, torch.from_numpy(tracks), torch.ones(len(tracks)))
    return raw, torch.from_numpy(labels)


@functools.lru_cache(maxsize=8)
def _reference_statistics(image_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    raw, _ = calorimeter_energies(REFERENCE_EVENTS, image_size, REFERENCE_SEED)
    scaled = torch.log1p(raw)
    return scaled.mean(dim=(0, 2, 3)), scaled.std(dim=(0, 2, 3)).clamp_min(1e-6)


def to_network_input(raw: torch.Tensor, inplace: bool = False) -> torch.Tensor:
    """log(1 + E) per pixel, then each channel standardised with fixed reference statistics."""
    mean, std = _reference_statistics(int(raw.shape[-1]))
    scaled = raw.log1p_() if inplace else torch.log1p(raw)
    return scaled.sub_(mean[None, :, None, None]).div_(std[None, :, None, None])


def calorimeter_images(n: int, image_size: int, seed: int, signal_fraction: float = 0.5,
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """Network-ready float32 (n, 3, S, S) calorimeter images and int64 labels (1 = signal)."""
    raw, labels = calorimeter_energies(n, image_size, seed, signal_fraction)
    return to_network_input(raw, inplace=True), labels


def hep_datasets(image_size: int, n_train: int, n_eval: int, seed: int,
                 ) -> tuple[Dataset, Dataset]:
    """Balanced train and eval splits drawn from independent seeds."""
    train_seed, eval_seed = (int(s.generate_state(1)[0])
                             for s in np.random.SeedSequence(seed).spawn(2))
    out = []
    for name, n, split_seed in (("train", n_train, train_seed), ("eval", n_eval, eval_seed)):
        images, labels = calorimeter_images(n, image_size, split_seed)
        out.append(Dataset(images, labels,
                           f"generated RPV-SUSY vs QCD calorimeter images, {name}: {n} events "
                           f"{image_size}x{image_size}x3, seed {seed}"))
    return out[0], out[1]
