"""The parameter-server family, gossip, hybrid and HOGWILD! over real ranks
(docs/spec/strategies.md):
the equivalences the issue names (ps-sync with one worker = single-rank training; ssp with
s=0 = ps-sync; downpour with n_fetch = n_push = 1 = ps-async), bytes counted where they are
sent against the analytic volumes, and runs through `dtbench run` with the records' roles,
staleness and wait fractions."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.distributed.test_strategies import (
    TINY,
    dtbench,
    expected,
    mean_counted,
    records,
    requires_mpi,
    run_check,
)


def test_one_worker_ps_sync_is_single_rank_training_and_downpour_1_1_is_ps_async(
        tmp_path: Path) -> None:
    report = run_check(tmp_path, "hep_cnn", ["single", "ps-sync", "ps-async",
                                             "downpour:n_fetch=1,n_push=1", "ssp:s=0"])
    single = report["single"]["losses"]
    assert len(single) == 3 and single[0] != single[-1]
    np.testing.assert_allclose(report["ps-sync"]["losses"], single, rtol=1e-5)
    np.testing.assert_allclose(report["ssp:s=0"]["losses"], single, rtol=1e-5)
    assert report["downpour:n_fetch=1,n_push=1"]["losses"] == report["ps-async"]["losses"]


def test_two_workers_ssp_s0_is_ps_sync_and_bytes_match_the_volumes(tmp_path: Path) -> None:
    entries = ["ps-sync", "ssp:s=0", "ps-async", "downpour:n_fetch=3,n_push=3"]
    report = run_check(tmp_path, "lstm", entries, world=3)
    assert report["ssp:s=0"]["losses"] == report["ps-sync"]["losses"]
    for entry in entries:
        name, _, text = entry.partition(":")
        options = dict(pair.split("=") for pair in text.split(",") if pair)
        counted = mean_counted(report[entry]["counted"])
        analytic = expected(name, "lstm", 3, **options)
        for kind in ("gradient", "parameter", "control"):
            assert counted[kind] == pytest.approx(analytic[kind], rel=0.05, abs=8), \
                (entry, kind, counted, analytic)


def test_servers_are_the_last_ranks_and_the_record_says_so(tmp_path: Path) -> None:
    out = tmp_path / "store"
    result = dtbench("run", "-w", "hep_cnn", "-n", "3", "--strategy", "ps-async",
                     "--strategy-opt", "servers=1", *TINY, "--out", str(out))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (record,) = records(out)
    metrics = {m["name"]: m for m in record["metrics"]}
    assert metrics["comm_bytes"]["roles"] == ["worker", "worker", "server"]
    assert len(metrics["staleness"]["samples"]) == metrics["updates_per_s"]["updates"][0]
    assert metrics["staleness"]["damp_stale"] is True  # the default rule, named in the record
    # two pushers: the workload's momentum 0.9 becomes 1 - 2(1 - 0.9) on the server
    assert metrics["staleness"]["server_momentum"] == pytest.approx(0.8)
    assert len(metrics["wait_fraction"]["per_worker"]) == 2
    assert record["spec"]["global_batch"] == 2 * record["spec"]["batch_per_rank"]


@pytest.mark.parametrize(("strategy", "options"), [
    ("ps-sync", ("servers=1",)), ("ssp", ("servers=1",)),
    ("downpour", ("n_push=0",)), ("ps-async", ("servers=3",))])
def test_bad_options_exit_2_with_one_line_and_write_nothing(tmp_path: Path, strategy: str,
                                                            options: tuple[str, ...]) -> None:
    out = tmp_path / "store"
    args = [arg for option in options for arg in ("--strategy-opt", option)]
    result = dtbench("run", "-w", "lstm", "-n", "3" if strategy != "ps-sync" else "1",
                     "--strategy", strategy, *args, *TINY, "--out", str(out))
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert not out.exists() or not any(out.rglob("*.json"))


@requires_mpi
def test_ps_async_over_mpi_counts_the_same_bytes(tmp_path: Path) -> None:
    out = tmp_path / "store"
    result = dtbench("run", "-w", "lstm", "-n", "3", "--comm", "mpi", "--strategy",
                     "ps-async", *TINY, "--out", str(out))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (record,) = records(out)
    metrics = {m["name"]: m for m in record["metrics"]}
    for kind in ("gradient", "parameter"):
        found = metrics[f"comm_bytes_{kind}"]
        assert found["value"] == pytest.approx(found["expected"], rel=0.01)
    assert json.dumps(record["spec"]["comm"]) == '"mpi"'


def test_gossip_at_two_ranks_is_local_sgd_every_step_and_hogwild_shares_one_model(
        tmp_path: Path) -> None:
    report = run_check(tmp_path, "hep_cnn", ["gossip", "localsgd:period=1", "hogwild"])
    np.testing.assert_allclose(report["gossip"]["losses"],
                               report["localsgd:period=1"]["losses"], rtol=1e-5)
    assert mean_counted(report["gossip"]["counted"])["parameter"] == pytest.approx(
        expected("gossip", "hep_cnn", 2)["parameter"], rel=0.01)
    assert sum(mean_counted(report["hogwild"]["counted"]).values()) == 0
    # One model in shared memory: rank 1 holds no parameters of its own.
    assert report["hogwild"]["state_bytes"]["parameters"] > 0


def test_hybrid_with_one_group_is_ddp_and_its_bytes_match(tmp_path: Path) -> None:
    reference = run_check(tmp_path / "ddp", "hep_cnn", ["ddp"], world=2)
    report = run_check(tmp_path / "hybrid", "hep_cnn", ["hybrid:groups=1", "gossip"], world=3)
    np.testing.assert_allclose(report["hybrid:groups=1"]["losses"],
                               reference["ddp"]["losses"], rtol=1e-5)
    for entry, name, options in (("hybrid:groups=1", "hybrid", {"groups": 1}),
                                 ("gossip", "gossip", {})):
        counted = mean_counted(report[entry]["counted"])
        analytic = expected(name, "hep_cnn", 3, **options)
        for kind in ("gradient", "parameter", "control"):
            assert counted[kind] == pytest.approx(analytic[kind], rel=0.05, abs=8), \
                (entry, kind, counted, analytic)


@pytest.mark.parametrize("args", [
    ("--strategy", "hybrid", "--strategy-opt", "groups=2", "-n", "4"),
    ("--strategy", "hogwild", "-n", "2", "--launcher", "torchrun"),
    ("--strategy", "hogwild", "-n", "1", "--nnodes", "2", "--launcher", "torchrun",
     "--master-addr", "127.0.0.1")])
def test_hybrid_and_hogwild_refuse_what_they_cannot_run(tmp_path: Path,
                                                        args: tuple[str, ...]) -> None:
    result = dtbench("run", "-w", "lstm", *args, *TINY, "--out", str(tmp_path / "store"))
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


ASYNC = ("ps-sync", "ps-async", "downpour", "ssp", "gossip", "hybrid", "hogwild")
WORKLOADS = ("alexnet", "resnet50", "hep_cnn", "lstm")
# Where each may run besides gloo/local (hogwild: the local launcher only; gossip needs no
# server, hybrid and the parameter servers do).
ELSEWHERE = {"ps-sync": ("torchrun", "mpirun"), "ps-async": ("torchrun", "mpirun"),
             "downpour": ("torchrun", "mpirun"), "hybrid": ("torchrun", "mpirun"),
             "ssp": ("mpirun",), "gossip": ("torchrun", "mpirun"), "hogwild": ()}
# The default run: each strategy on gloo/local with one workload (in turn), and two of them
# under torchrun and mpirun; `--matrix` runs every workload and launcher.
DEFAULT = {("ps-async", "torchrun"), ("hybrid", "mpirun")}
# These three have a default run under another launcher (above) or a default fault and
# evaluation test through `dtbench run` (test_async_faults.py, test_async_evaluation.py):
# their gloo/local run is in --matrix only.
LOCAL_IN_MATRIX = ("ps-async", "hybrid", "downpour")
# ps-sync and ssp run through `dtbench run` in the equivalence tests below (one-worker ps-sync,
# ssp s=0 = ps-sync, servers last): their matrix runs are in --matrix only.
EQUIVALENCE_ONLY = ("ps-sync", "ssp")


def _cases() -> list[object]:
    cases = []
    for index, strategy in enumerate(ASYNC):
        for launcher in ("local", *ELSEWHERE[strategy]):
            for offset, workload in enumerate(WORKLOADS):
                chosen = (launcher == "local" and offset == index % 4
                          and strategy not in EQUIVALENCE_ONLY + LOCAL_IN_MATRIX) or (
                    (strategy, launcher) in DEFAULT and offset == (index + 1) % 4)
                marks = [] if chosen else [pytest.mark.matrix]
                if launcher == "mpirun":
                    marks.append(requires_mpi)
                cases.append(pytest.param(strategy, launcher, workload, marks=marks,
                                          id=f"{strategy}-{launcher}-{workload}"))
    return cases


@pytest.mark.parametrize(("strategy", "launcher", "workload"), _cases())
def test_async_strategy_runs(tmp_path: Path, strategy: str, launcher: str,
                             workload: str) -> None:
    out = tmp_path / "store"
    comm = "mpi" if launcher == "mpirun" else "gloo"
    options = ("--strategy-opt", "s=1") if strategy == "ssp" else ()
    result = dtbench("run", "-w", workload, "-n", "3", "--comm", comm, "--launcher", launcher,
                     "--strategy", strategy, *options, *TINY, "--out", str(out))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (record,) = records(out)
    assert record["status"] == "success", record["error"]
    metrics = {m["name"]: m for m in record["metrics"]}
    roles = metrics["state_bytes"]["roles"]
    assert len(roles) == 3 and ("server" in roles) == (strategy not in ("gossip", "hogwild"))
