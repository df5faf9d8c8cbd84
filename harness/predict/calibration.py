"""Calibration from stored records: α and β per collective, fitted by least squares over the
message sizes of `dtbench comm` records, and the compute seconds per sample of single-rank
runs. Everything here is a pure function of the records, so the same records calibrate the
same model on any machine.
"""
from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from harness.core.errors import UsageError
from harness.predict.costs import ALGORITHMS, Link, link_from_fit, log2ceil
from harness.predict.network import Network, OpLink
from harness.records.experiment import experiment_of, fields_of, machine_of, version_of
from harness.spec.kinds import COLLECTIVE, TRAINING, kind_of

COMM_OPS = ("allreduce", "allgather", "reducescatter", "broadcast")
PLAIN = (None, "ddp")  # single-rank runs that are compute alone (no strategy, or ddp)


@dataclass(frozen=True)
class Fit:
    """t = α + β·S fitted over one collective's message sizes on one backend and world size."""

    comm: str
    op: str
    world_size: int
    link: str
    alpha: float
    beta: float
    r2: float
    sizes: tuple[float, ...]
    times: tuple[float, ...]
    run_ids: tuple[str, ...]
    created_at: str

    def predict(self, nbytes: float) -> float:
        return self.alpha + self.beta * nbytes

    @property
    def source(self) -> str:
        """How the links priced from this fit name it (network.OpLink.source)."""
        return f"{self.comm} {self.op} on {self.world_size} ranks ({self.link})"

    @property
    def residuals(self) -> tuple[float, ...]:
        """(fitted - measured) / measured at each size."""
        return tuple((self.predict(s) - t) / t for s, t in zip(self.sizes, self.times,
                                                               strict=True))


def fit_alpha_beta(sizes: list[float], times: list[float]) -> tuple[float, float, float]:
    """(α, β, R²) of t = α + β·S by least squares weighted by 1/t, so every size counts by its
    relative error (sizes span five decades; plain least squares would fit the largest only
    and leave α at the mercy of a few megabytes). α and β are kept >= 0 (refitting the other
    alone when one would go negative). R² is of the times themselves."""
    s, t = np.asarray(sizes, float), np.asarray(times, float)
    if len(s) < 2 or np.any(t <= 0):
        raise ValueError("an α-β fit needs two or more sizes with positive times")
    weight = 1 / t
    design = np.stack([np.ones_like(s), s], axis=1) * weight[:, None]
    (alpha, beta), *_ = np.linalg.lstsq(design, t * weight, rcond=None)
    if beta < 0:
        alpha, beta = float(np.sum(t * weight**2) / np.sum(weight**2)), 0.0
    elif alpha < 0:
        alpha, beta = 0.0, float(np.sum(s * t * weight**2) / np.sum((s * weight) ** 2))
    fitted = alpha + beta * s
    spread = float(np.sum((t - t.mean()) ** 2))
    r2 = 1 - float(np.sum((t - fitted) ** 2)) / spread if spread > 0 else 1.0
    return float(alpha), float(beta), r2


def _rate(record: dict[str, Any]) -> str | None:
    """The link rate a record names: spec.env (…RATE… or …LINK…), else machine.interconnect's
    tbf cap, rate or NIC speed."""
    env = record["spec"].get("env")
    if isinstance(env, dict):
        for key in sorted(env):
            if ("RATE" in key.upper() or "LINK" in key.upper()) and env[key]:
                return str(env[key])
    link = record.get("machine", {}).get("interconnect")
    if isinstance(link, dict):
        capped = link.get("tbf_mbps")
        if isinstance(capped, (int, float)) and not isinstance(capped, bool) and capped > 0:
            return f"{capped:g} Mb/s tbf"
        for key in ("rate", "link_rate"):
            if link.get(key):
                return str(link[key])
        speed = link.get("speed_mbps")
        if isinstance(speed, (int, float)) and not isinstance(speed, bool) and speed > 0:
            return f"{speed:g} Mb/s"
    return None


def link_key(record: dict[str, Any]) -> str:
    """Which links a record's ranks talked over: 'one node', or 'N nodes' and the rate."""
    nnodes = record["spec"].get("nnodes")
    nodes = nnodes if isinstance(nnodes, int) and not isinstance(nnodes, bool) else 1
    rate = _rate(record) if nodes > 1 else None
    if nodes <= 1:
        return "one node"
    return f"{nodes} nodes" + (f", {rate}" if rate else "")


def _per_size(record: dict[str, Any]) -> list[tuple[float, float]]:
    for entry in record.get("metrics", []):
        if entry.get("name") == "busbw" and isinstance(entry.get("per_size"), list):
            rows = [(row.get("bytes"), row.get("time_s")) for row in entry["per_size"]
                    if isinstance(row, dict)]
            return [(float(b), float(t)) for b, t in rows if isinstance(b, (int, float))
                    and isinstance(t, (int, float)) and b > 0 and t > 0 and math.isfinite(t)]
    return []


def comm_fits(records: list[dict[str, Any]]) -> list[Fit]:
    """One fit per (comm backend, collective, world size, link) over the pooled sizes of every
    successful `dtbench comm` record of it, in a stable order."""
    pooled: dict[tuple[str, str, int, str], list[dict[str, Any]]] = {}
    for record in records:
        spec = record["spec"]
        if kind_of(spec) is not COLLECTIVE or record.get("status") != "success":
            continue
        op, comm, world = spec.get("op"), spec.get("comm"), spec.get("world_size")
        if op in COMM_OPS and isinstance(comm, str) and isinstance(world, int) and world > 1:
            pooled.setdefault((comm, op, world, link_key(record)), []).append(record)
    fits = []
    for (comm, op, world, link), group in sorted(pooled.items()):
        points = sorted(point for record in group for point in _per_size(record))
        if len(points) < 2:
            continue
        alpha, beta, r2 = fit_alpha_beta([p[0] for p in points], [p[1] for p in points])
        fits.append(Fit(comm, op, world, link, alpha, beta, r2,
                        tuple(p[0] for p in points), tuple(p[1] for p in points),
                        tuple(sorted(r["run_id"] for r in group)),
                        max(r["created_at"] for r in group)))
    return fits


def _p2p_link(fit: Fit) -> Link:
    """Between two ranks a broadcast is one message (α + S·β); on more, a binomial tree."""
    steps = 1 if fit.world_size == 2 else log2ceil(fit.world_size)
    return Link(fit.alpha / steps, fit.beta / steps)


def network_from_fits(fits: list[Fit], comm: str, algorithm: str = "ring",
                      link: str | None = None) -> tuple[Network, list[Fit]]:
    """The calibrated network of one comm backend (and link, when given and measured), and
    the fits it used; UsageError when no comm record of that backend exists."""
    if algorithm not in ALGORITHMS:
        raise UsageError(f"--algorithm {algorithm!r}: choose from {', '.join(ALGORITHMS)}")
    mine = [fit for fit in fits if fit.comm == comm]
    if not mine:
        known = sorted({fit.comm for fit in fits})
        raise UsageError(f"no calibration records for comm backend {comm!r} (dtbench comm "
                         f"--comm {comm} ...; calibrated backends: {', '.join(known) or 'none'})")
    if link is not None and any(fit.link == link for fit in mine):
        mine = [fit for fit in mine if fit.link == link]
    links = []
    for fit in mine:
        links.append(OpLink(fit.op, fit.world_size, link_from_fit(
            fit.op, algorithm, fit.world_size, fit.alpha, fit.beta), fit.source))
        if fit.op == "broadcast":
            links.append(OpLink("p2p", fit.world_size, _p2p_link(fit), fit.source))
    label = f"{comm} calibrated ({', '.join(sorted({fit.link for fit in mine}))})"
    return Network(label, False, tuple(links), algorithm), mine


@dataclass(frozen=True)
class ComputeCalibration:
    """Compute seconds per sample on one rank, the per-step times it was measured with, and
    the step-to-step spread that prices the wait for the slowest rank (cv: stated, estimated
    from enough steps, or 0; `spread` says which)."""

    seconds_per_sample: float
    step_samples: tuple[float, ...]
    batch: int
    threads: int | None
    run_ids: tuple[str, ...]
    created_at: str
    source: str
    assumed: bool = False
    scaled: bool = False  # from runs at other threads per rank, assuming linear scaling
    fixed_s: float = 0.0  # seconds a step takes whatever its batch (framework, optimizer)
    cv: float = 0.0  # the step-to-step coefficient of variation the wait is priced from
    spread: str = ""  # where cv came from, or why the wait is not priced

    def rate(self, batch: float) -> float:
        """Samples per second of one rank at `batch`: batch / (fixed_s + batch · s)."""
        return batch / (self.fixed_s + batch * self.seconds_per_sample)

    def step(self, samples: float, ranks: int = 1) -> float:
        """Seconds of compute for `samples` on one rank, as the slowest of `ranks` ranks that
        wait for each other: with a spread (normal step times of coefficient of variation cv)
        the expected maximum of n is μ·(1 + cv·Φ⁻¹((n - 0.375)/(n + 0.25))) (Blom 1958;
        within 3% of the exact order statistic from n = 3 up); without one, μ."""
        mean = self.fixed_s + samples * self.seconds_per_sample
        return mean * (1 + self.cv * expected_max_normal(ranks)) if self.cv > 0 else mean


def expected_max_normal(n: int) -> float:
    """E[max of n standard normals] by Blom's approximation (0 for one)."""
    if n <= 1:
        return 0.0
    from scipy.stats import norm

    return float(norm.ppf((n - 0.375) / (n + 0.25)))


def step_times(record: dict[str, Any]) -> list[float]:
    for entry in record.get("metrics", []):
        if entry.get("name") == "step_time":
            samples = entry.get("samples") or []
            values = [float(s) for s in samples if isinstance(s, (int, float)) and s > 0]
            if not values and isinstance(entry.get("value"), (int, float)):
                values = [float(entry["value"])]
            return values
    return []


def compute_from_record(record: dict[str, Any], threads: int | None = None,
                        note: str = "") -> ComputeCalibration:
    """Seconds per sample of one run: its per-step times over its per-rank batch; scaled
    linearly when it ran on other threads per rank than `threads` (said in `source`)."""
    spec = record["spec"]
    batch = spec.get("batch_per_rank")
    times = step_times(record)
    if not times or not isinstance(batch, int) or batch < 1:
        raise UsageError(f"{record['run_id']}: no step_time and batch to calibrate compute from")
    ran = spec.get("threads") if isinstance(spec.get("threads"), int) else None
    scale = ran / threads if threads and ran else 1.0
    per_sample = [t / batch * scale for t in times]
    source = f"{record['run_id']} (batch {batch}, {ran or '?'} thread(s) per rank)"
    if scale != 1.0:
        source += f", scaled x{scale:g} to {threads} thread(s): assumes linear thread scaling"
    return ComputeCalibration(statistics.median(per_sample), tuple(per_sample), batch,
                              threads or ran, (record["run_id"],), record["created_at"],
                              source + note, scaled=scale != 1.0)


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def single_rank_run(record: dict[str, Any]) -> bool:
    """A successful single-rank training run with step times and a per-rank batch."""
    spec = record["spec"]
    return (record.get("status") == "success" and kind_of(spec) is TRAINING
            and spec.get("world_size") == 1 and _positive_int(spec.get("batch_per_rank"))
            and bool(step_times(record)))


def compute_run(record: dict[str, Any]) -> bool:
    """A single-rank run that measures compute: plain or ddp. Another strategy's single-rank
    run adds its own machinery (harness.predict.overhead measures that from it)."""
    return single_rank_run(record) and record["spec"].get("strategy") in PLAIN


def _batch_free(record: dict[str, Any]) -> tuple[str, str, str]:
    """What a batch sweep's runs share: every identity field but the batch (the global batch
    as its multiple of it), the machine and the version of the code
    (harness/records/experiment.py)."""
    fields = {k: v for k, v in fields_of(record["spec"]).items() if k != "batch_per_rank"}
    batch, total = record["spec"].get("batch_per_rank"), fields.get("global_batch")
    if isinstance(total, int | float) and isinstance(batch, int) and batch > 0:
        fields["global_batch"] = total / batch
    return (json.dumps(fields, sort_keys=True, default=str), machine_of(record),
            version_of(record))


def compute_from_records(records: list[dict[str, Any]], *, workload: str, size: str,
                         precision: str, backend: str, threads: int | None = None,
                         batch: int | None = None) -> ComputeCalibration | None:
    """The single-rank plain or ddp runs of the same workload, size, precision and backend
    that match best: the same threads per rank (else the most), then the nearest batch; of
    those, one experiment at one version of the code on one machine (the newest record's:
    the experiment identity every view keeps apart), never several pooled. Its repeats give
    the median of their medians, and their steps' spread around their own medians (a shared
    host's slow hour moves a whole run, not one rank's steps). None when none."""
    candidates = [r for r in records if compute_run(r) and all(
        r["spec"].get(k) == v for k, v in (("workload", workload), ("size", size),
                                           ("precision", precision), ("backend", backend)))]
    if not candidates:
        return None

    def rank(record: dict[str, Any]) -> tuple[int, int, int]:
        spec = record["spec"]
        ran = spec.get("threads") if isinstance(spec.get("threads"), int) else 0
        thread_miss = (ran != threads) if threads else 0
        return (thread_miss, -ran if not threads else 0,
                abs(spec["batch_per_rank"] - batch) if batch else 0)

    best = min(rank(r) for r in candidates)
    tied = [r for r in candidates if rank(r) == best]
    newest = max(tied, key=lambda r: (str(r.get("created_at", "")), r["run_id"]))
    chosen = sorted((r for r in tied if experiment_of(r) == experiment_of(newest)),
                    key=lambda r: r["run_id"])
    parts = [compute_from_record(r, threads) for r in chosen]
    level = statistics.median(part.seconds_per_sample for part in parts)
    samples = tuple(s * level / part.seconds_per_sample for part in parts
                    for s in part.step_samples)
    note = "" if len(parts) == 1 else f" and {len(parts) - 1} more run(s)"
    if len(tied) > len(chosen):
        note += (f"; {len(tied) - len(chosen)} run(s) of other experiments or commits left "
                 "out (the newest's alone)")
    found = ComputeCalibration(level, samples, parts[0].batch,
                               parts[0].threads, tuple(r["run_id"] for r in chosen),
                               max(r["created_at"] for r in chosen), parts[0].source + note,
                               scaled=parts[0].scaled)
    sweep = [r for r in candidates if rank(r)[:2] == best[:2]
             and _batch_free(r) == _batch_free(newest)]
    return batch_curve(found, sweep, threads)


def batch_curve(found: ComputeCalibration, sweep: list[dict[str, Any]], threads: int | None
                ) -> ComputeCalibration:
    """With runs of one machine at two or more batches (a batch sweep, `dtbench run
    --batch-size 8,16,32`), the step as t(b) = t0 + b·s fitted through each batch's median
    step (weighted least squares, t0 >= 0): a smaller per-rank batch then runs below a larger
    one's rate. The measured steps' spread is kept, scaled to s. Otherwise `found` as is."""
    by_batch: dict[int, list[float]] = {}
    for record in sweep:
        part = compute_from_record(record, threads)
        by_batch.setdefault(part.batch, []).append(part.seconds_per_sample * part.batch)
    if len(by_batch) < 2:
        return found
    batches = sorted(by_batch)
    fixed, per_sample, _ = fit_alpha_beta([float(b) for b in batches],
                                          [statistics.median(by_batch[b]) for b in batches])
    if per_sample <= 0:
        return found
    middle = statistics.median(found.step_samples) if found.step_samples else 0.0
    samples = tuple(v * per_sample / middle for v in found.step_samples) if middle else ()
    runs = tuple(sorted({r["run_id"] for r in sweep}))
    return replace(found, seconds_per_sample=per_sample, step_samples=samples,
                   fixed_s=fixed, run_ids=runs,
                   created_at=max(r["created_at"] for r in sweep),
                   source=f"{found.source}; batch sweep {', '.join(map(str, batches))}: "
                   f"step = {fixed * 1e3:.4g} ms + batch x {per_sample * 1e3:.4g} ms")


def compute_from_rate(flops_per_sample: float, rate: float) -> ComputeCalibration:
    """An assumed sustained FLOP/s per rank: seconds per sample = FLOPs per sample / rate."""
    if not rate > 0 or not math.isfinite(rate):
        raise UsageError(f"--compute-rate must be a FLOP/s above 0, got {rate!r}")
    return ComputeCalibration(flops_per_sample / rate, (), 0, None, (), "",
                              f"assumed {rate:.4g} FLOP/s per rank", assumed=True)


def curve_points(text: str, flag: str = "--compute-curve") -> list[tuple[int, float]]:
    """The (batch, samples/s) pairs of 'BATCH:SAMPLES_PER_S,...'; UsageError naming `flag`."""
    points = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        batch, sep, rate = part.partition(":")
        try:
            b, r = int(batch), float(rate)
        except ValueError:
            b, r = 0, 0.0
        if not sep or b < 1 or not (r > 0 and math.isfinite(r)):
            raise UsageError(f"{flag} {text!r}: cannot read {part!r}; expected "
                             "BATCH:SAMPLES_PER_SECOND pairs such as 32:195,64:219")
        points.append((b, r))
    if not points:
        raise UsageError(f"{flag}: give BATCH:SAMPLES_PER_SECOND pairs")
    return points


def compute_from_curve(text: str, flag: str = "--compute-curve") -> ComputeCalibration:
    """One device's throughput at one or more batches, 'BATCH:SAMPLES_PER_S,...' (published
    single-device figures): step(b) = t0 + b·s fitted through the points (weighted least
    squares as the link fits, t0 >= 0; one point gives t0 = 0), so that a smaller per-device
    batch runs below the rate of a larger one."""
    points = curve_points(text, flag)
    batches = sorted({b for b, _ in points})
    if len(batches) == 1:
        b = batches[0]
        rate = statistics.median(r for bb, r in points if bb == b)
        fixed, per_sample = 0.0, 1 / rate
    else:
        fixed, per_sample, _ = fit_alpha_beta([float(b) for b, _ in points],
                                              [b / r for b, r in points])
    shown = ", ".join(f"{r:g}/s at batch {b}" for b, r in points)
    return ComputeCalibration(per_sample, (), max(batches), None, (), "",
                              f"given one-device throughput {shown}", assumed=True,
                              fixed_s=fixed)
