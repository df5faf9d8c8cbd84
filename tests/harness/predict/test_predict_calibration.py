"""α-β fits, networks and compute calibration from synthetic records."""
from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from harness.core.errors import UsageError
from harness.predict.calibration import (
    ComputeCalibration,
    comm_fits,
    compute_from_rate,
    compute_from_records,
    expected_max_normal,
    fit_alpha_beta,
    link_key,
    network_from_fits,
)
from harness.predict.costs import Link
from harness.predict.network import parse_network
from harness.predict.spread import with_spread


def test_fit_recovers_exact_alpha_and_beta() -> None:
    sizes = [2.0**k for k in range(10, 27)]
    alpha, beta, r2 = fit_alpha_beta(sizes, [5e-4 + 1e-9 * s for s in sizes])
    assert alpha == pytest.approx(5e-4) and beta == pytest.approx(1e-9) and r2 == pytest.approx(1)


def test_fit_weighs_sizes_by_relative_error() -> None:
    # +10% on every small message moves alpha by 10%, not by the noise of the large ones
    sizes = [1e3, 1e4, 1e5, 1e6, 1e7]
    times = [(1e-4 + 1e-9 * s) * (1.1 if s < 1e5 else 1.0) for s in sizes]
    alpha, beta, _ = fit_alpha_beta(sizes, times)
    assert alpha == pytest.approx(1.1e-4, rel=0.05) and beta == pytest.approx(1e-9, rel=0.05)


def test_fit_keeps_alpha_and_beta_non_negative() -> None:
    alpha, beta, _ = fit_alpha_beta([1e3, 1e6, 1e7], [1.1e-3, 1e-3, 0.9e-3])  # falls: beta 0
    assert beta == 0 and alpha == pytest.approx(1e-3, rel=0.05)
    alpha, beta, _ = fit_alpha_beta([1e3, 1e6, 1e7], [1e-6, 1e-3, 1.1e-2])
    assert alpha >= 0 and beta > 0
    with pytest.raises(ValueError):
        fit_alpha_beta([1e3], [1.0])


def test_comm_fits_pool_records_and_calibrate_a_network(comm_record) -> None:
    records = [comm_record("allreduce", 4e-4, 1e-9, run_id="a"),
               comm_record("allreduce", 4e-4, 1e-9, run_id="b"),
               comm_record("broadcast", 1e-4, 5e-10)]
    fits = comm_fits(records)
    assert [(f.op, f.world_size, f.run_ids) for f in fits] == [
        ("allreduce", 2, ("a", "b")), ("broadcast", 2, ("comm-gloo-broadcast-2",))]
    assert len(fits[0].sizes) == 8 and max(map(abs, fits[0].residuals)) < 1e-9
    network, used = network_from_fits(fits, "gloo")
    assert not network.assumed and used == fits
    # ring allreduce measured on 2 ranks: link alpha = 4e-4 / 2; at 4 ranks 6 alpha + 1.5 S beta
    assert network.time("allreduce", 1e6, 4) == pytest.approx(6 * 2e-4 + 1.5 * 1e6 * 1e-9)
    # a broadcast between two ranks is one message: the point-to-point link
    p2p = network.link("p2p", 2)
    assert (p2p.alpha, p2p.beta) == pytest.approx((1e-4, 5e-10))
    assert network.time("allgather", 1e6, 2) > 0  # borrows the allreduce link


def test_missing_backend_is_a_usage_error(comm_record) -> None:
    fits = comm_fits([comm_record("allreduce", 1e-4, 1e-9)])
    with pytest.raises(UsageError, match="no calibration records for comm backend 'mpi'"):
        network_from_fits(fits, "mpi")


def test_link_key_names_nodes_and_rate(comm_record) -> None:
    assert link_key(comm_record("allreduce", 1, 1)) == "one node"
    capped = comm_record("allreduce", 1, 1, nnodes=2, env={"DTBENCH_LINK_RATE": "100mbit"})
    assert link_key(capped) == "2 nodes, 100mbit"
    shaped = comm_record("allreduce", 1, 1, nnodes=2)
    shaped["machine"] = {"interconnect": {"type": "ethernet", "interface": "dtb0",
                                          "speed_mbps": 10000, "tbf_mbps": 50.0}}
    assert link_key(shaped) == "2 nodes, 50 Mb/s tbf"
    shaped["machine"]["interconnect"].pop("tbf_mbps")
    assert link_key(shaped) == "2 nodes, 10000 Mb/s"


def test_compute_prefers_same_threads_then_nearest_batch(run_record) -> None:
    records = [run_record([0.32] * 5, threads=1, batch=32, run_id="t1"),
               run_record([0.20] * 5, threads=2, batch=32, run_id="t2"),
               run_record([0.17] * 5, threads=1, batch=16, run_id="t1b16")]
    found = compute_from_records(records[:2], workload="hep_cnn", size="small",
                                 precision="fp32", backend="cpu", threads=1, batch=30)
    assert found is not None and found.run_ids == ("t1",)
    assert found.seconds_per_sample == pytest.approx(0.01)
    # with both batches at one thread, a batch sweep: the curve through both
    swept = compute_from_records(records, workload="hep_cnn", size="small", precision="fp32",
                                 backend="cpu", threads=1, batch=30)
    assert swept is not None and swept.run_ids == ("t1", "t1b16")
    assert swept.fixed_s + 32 * swept.seconds_per_sample == pytest.approx(0.32)
    assert swept.fixed_s + 16 * swept.seconds_per_sample == pytest.approx(0.17)
    whole_node = compute_from_records(records, workload="hep_cnn", size="small",
                                      precision="fp32", backend="cpu")
    assert whole_node is not None and whole_node.run_ids == ("t2",)  # most threads
    scaled = compute_from_records(records[1:2], workload="hep_cnn", size="small",
                                  precision="fp32", backend="cpu", threads=1)
    assert scaled is not None and scaled.seconds_per_sample == pytest.approx(0.4 / 32)
    assert "linear thread scaling" in scaled.source
    assert compute_from_records(records, workload="lstm", size="small", precision="fp32",
                                backend="cpu") is None


def _calibrated(run_record, steps: list[float]) -> ComputeCalibration:
    found = compute_from_records([run_record(steps, batch=1)], workload="hep_cnn",
                                 size="small", precision="fp32", backend="cpu")
    assert found is not None
    return found


def test_the_slowest_rank_wait_is_priced_only_from_a_stated_or_robust_spread(run_record) -> None:
    """Eight steps of a shared host with one 3x hiccup once made the slowest of 1,024 ranks
    wait for the hiccup every step; now too few steps price no wait, and say so."""
    short = with_spread(_calibrated(run_record, [1.0, 1.02, 0.98, 3.0, 1.01, 0.99, 1.0, 1.03]))
    assert short.cv == 0 and short.step(1, 1024) == short.step(1, 1) == pytest.approx(1.0, 0.02)
    assert short.spread.startswith("not priced: 8 measured step(s), fewer than the 30")
    # 60 steps of 2% noise with three 3x hiccups: a spread near 2%, the hiccups ignored
    rng = np.random.default_rng(5)
    steps = [float(v) for v in rng.normal(1.0, 0.02, 60)]
    steps[10] = steps[30] = steps[50] = 3.0
    found = with_spread(_calibrated(run_record, steps))
    assert 0.012 < found.cv < 0.03 and "from 60 measured steps" in found.spread
    stated = with_spread(_calibrated(run_record, steps), 0.05)
    assert stated.cv == 0.05 and "(--step-cv)" in stated.spread
    mean = stated.step(1, 1)
    assert stated.step(1, 1024) == pytest.approx(mean * (1 + 0.05 * expected_max_normal(1024)))


def test_assumed_compute_rate() -> None:
    assumed = with_spread(compute_from_rate(15.43e9, 2e12))
    assert assumed.assumed and assumed.seconds_per_sample == pytest.approx(15.43e9 / 2e12)
    assert assumed.step(1, 9600) == assumed.seconds_per_sample
    assert assumed.spread == "not priced: no measured steps (--step-cv states one)"
    with pytest.raises(UsageError):
        compute_from_rate(1.0, 0.0)


def test_calibration_never_pools_experiments_or_commits(run_record) -> None:
    """A quick-suite and a scaling-suite run of the same spec are two experiments: the newest
    alone calibrates, and the source says the other was left out."""
    quick = run_record([0.1] * 3, batch=1, run_id="quick", suite="quick")
    scaling = run_record([0.3] * 3, batch=1, run_id="scaling", suite="scaling",
                         created=dt.datetime(2026, 2, 1, tzinfo=dt.UTC))
    found = compute_from_records([quick, scaling], workload="hep_cnn", size="small",
                                 precision="fp32", backend="cpu")
    assert found is not None and found.run_ids == ("scaling",)
    assert found.seconds_per_sample == pytest.approx(0.3)
    assert "1 run(s) of other experiments or commits left out" in found.source


def test_network_strings() -> None:
    aries = parse_network("Aries")
    assert aries.assumed and aries.link("allreduce", 8) == Link(1.3e-6, 1e-10)
    assert "(assumed)" in aries.description
    given = parse_network("alpha=2e-6,beta=1e-10", "tree")
    assert given.link("p2p", 2) == Link(2e-6, 1e-10) and given.algorithm == "tree"
    assert parse_network("alpha=0,bandwidth=1e9").link("p2p", 2) == Link(0.0, 1e-9)
    for bad in ("fast", "alpha=1", "alpha=x,beta=1", "alpha=-1,beta=1", "alpha=1,beta=1,gamma=2"):
        with pytest.raises(UsageError, match="--network"):
            parse_network(bad)


def test_tied_runs_share_their_level_and_their_own_spread(run_record) -> None:
    fast = run_record([0.9, 1.0, 1.1], batch=1, run_id="fast")
    slow = run_record([1.8, 2.0, 2.2], batch=1, run_id="slow")
    found = compute_from_records([fast, slow], workload="hep_cnn", size="small",
                                 precision="fp32", backend="cpu")
    assert found is not None and found.run_ids == ("fast", "slow")
    assert found.seconds_per_sample == pytest.approx(1.5)  # median of the runs' medians
    # each run's steps keep their relative spread (+-10%) around the common level
    assert sorted(found.step_samples) == pytest.approx([1.35, 1.35, 1.5, 1.5, 1.65, 1.65])
