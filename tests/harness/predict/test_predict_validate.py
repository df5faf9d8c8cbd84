"""--validate: measured multi-rank runs beside predictions made from calibration records."""
from __future__ import annotations

import pytest

from harness.predict.validate import (
    HEADER,
    core_sharing,
    summary,
    table_rows,
    validate,
    validation_markdown,
)

HEP_SMALL_BYTES = 149_634 * 4  # hep_cnn small: one DDP bucket (under the 1 MiB first cap)


@pytest.fixture
def calibration(run_record, comm_record) -> list[dict]:
    return [run_record([0.32] * 5, threads=1, batch=32, run_id="single"),
            comm_record("allreduce", 4e-4, 1e-9), comm_record("broadcast", 1e-4, 1e-9)]


def test_ddp_run_is_predicted_from_its_calibration(run_record, calibration) -> None:
    measured = run_record([0.3] * 5, world_size=2, comm="gloo", run_id="ddp2")
    (row,) = validate([measured], calibration)
    predicted = 0.32 + 4e-4 + HEP_SMALL_BYTES * 1e-9  # compute + one ring allreduce on 2
    assert row.strategy == "ddp" and row.link == "one node" and row.note == ""
    assert row.predicted == pytest.approx(predicted)
    assert row.error == pytest.approx((predicted - 0.3) / 0.3)
    cells = table_rows([row])[0]
    assert cells[2] == "ddp" and cells[10] == f"{row.error * 100:+.1f}%" and cells[11] == "yes"
    assert summary([row]).startswith("1 of 1 predictions within 15%")


def test_records_name_their_strategy_and_options(run_record, calibration) -> None:
    ps = run_record([1.0] * 3, world_size=3, comm="gloo", run_id="ps", strategy="ps-sync",
                    strategy_options={"K": 1, "wire_format": "v2"})
    unknown = run_record([1.0] * 3, world_size=2, comm="gloo", run_id="moe", strategy="moe")
    rows = {row.record["run_id"]: row for row in validate([ps, unknown], calibration)}
    assert rows["ps"].strategy == "ps-sync" and rows["ps"].predicted is not None
    assert rows["ps"].ctx is not None and rows["ps"].ctx.options["servers"] == 1
    assert rows["ps"].note == "options not modelled: wire_format"
    assert rows["moe"].predicted is None and "no model of strategy moe" in rows["moe"].note


def test_missing_calibration_is_a_note_not_a_crash(run_record, calibration) -> None:
    mpi = run_record([0.3] * 3, world_size=2, comm="mpi", run_id="mpi")
    other_threads = run_record([0.3] * 3, world_size=2, comm="gloo", threads=4, run_id="t4")
    rows = {row.record["run_id"]: row for row in validate([mpi, other_threads], calibration)}
    assert rows["mpi"].predicted is None and "no calibration records for comm backend 'mpi'" \
        in rows["mpi"].note
    assert "another thread count" in rows["t4"].note  # scaled from the 1-thread run
    assert "1 run(s) not predicted" in summary(list(rows.values()))


def test_ranks_sharing_cores_slow_compute(run_record) -> None:
    crowded = run_record([1.0], world_size=8, threads=2)  # 16 threads on 8 usable CPUs
    assert core_sharing(crowded) == 2.0
    assert core_sharing(run_record([1.0], world_size=2, threads=2)) == 1.0


def test_nodes_that_are_one_host_share_its_cores(run_record) -> None:
    """Two network-namespace "hosts" of one 2-core VM report one host name: their 4 ranks
    share 2 cores (compute x2); two real hosts (two names) or unknown names do not."""
    def two_nodes(*names: str | None) -> dict:
        record = run_record([1.0], world_size=4, threads=1, nnodes=2, nproc_per_node=2)
        record["machine"]["cpus_usable"] = 2
        record["machine"]["per_node"] = [{"hostname": name, "cpus_usable": 2} for name in names]
        return record

    assert core_sharing(two_nodes("vm", "vm")) == 2.0
    assert core_sharing(two_nodes("node1", "node2")) == 1.0
    assert core_sharing(two_nodes(None, None)) == 1.0


def test_communication_is_not_overlapped_where_compute_fills_the_cores(run_record) -> None:
    """2 ranks x 1 thread on 2 CPUs: full, so the models' overlap is off (a note says so);
    2 ranks x 1 thread on 4 CPUs: not; a GPU run never."""
    from harness.predict.validate import cores_full

    full = run_record([1.0], world_size=2, threads=1)
    full["machine"]["cpus_usable"] = 2
    assert cores_full(full)
    roomy = run_record([1.0], world_size=2, threads=1)
    roomy["machine"]["cpus_usable"] = 4
    assert not cores_full(roomy)
    gpu = run_record([1.0], world_size=2, threads=1, backend="cuda")
    gpu["machine"]["cpus_usable"] = 2
    assert not cores_full(gpu)


def test_parameter_servers_do_not_share_the_cores(run_record) -> None:
    """3 ranks x 1 thread on 2 CPUs: x1.5 for ranks that all compute, x1 when the record
    names one of them a server (it runs no model); roles that do not match the ranks, or a
    run over several nodes (where the servers sit is not recorded), count every rank."""
    def with_roles(record: dict, roles: list[str]) -> dict:
        record["metrics"].append({"name": "comm_bytes", "unit": "B", "value": 0.0,
                                  "roles": roles})
        return record

    def three(**spec: object) -> dict:
        record = run_record([1.0], world_size=3, threads=1, **spec)
        record["machine"]["cpus_usable"] = 2
        return record

    assert core_sharing(three()) == 1.5
    assert core_sharing(with_roles(three(), ["worker", "worker", "server"])) == 1.0
    assert core_sharing(with_roles(three(), ["worker", "server"])) == 1.5
    assert core_sharing(with_roles(three(nnodes=3, nproc_per_node=1),
                                   ["worker", "worker", "server"])) == 1.0  # 1 rank a node
    crowded = with_roles(run_record([1.0], world_size=8, threads=1),
                         ["worker"] * 6 + ["server"] * 2)
    crowded["machine"]["cpus_usable"] = 2
    assert core_sharing(crowded) == 3.0  # six computing ranks on two CPUs


def _with_forward(record: dict, seconds: float) -> dict:
    record["metrics"].append({"name": "phase_forward", "unit": "s", "value": seconds})
    return record


def test_forward_drift_separates_compute_error_from_communication(run_record,
                                                                   comm_record) -> None:
    """A 2-rank run whose forward (no communication under ddp) took 0.11 s per step against
    the single-rank 0.10 s at the same batch computed 10% slower than the model assumes."""
    single = _with_forward(run_record([0.32] * 5, threads=1, batch=32, run_id="single"), 0.10)
    calibration = [single, comm_record("allreduce", 4e-4, 1e-9),
                   comm_record("broadcast", 1e-4, 1e-9)]
    ddp = _with_forward(run_record([0.36] * 5, world_size=2, comm="gloo", run_id="ddp2"), 0.11)
    half = _with_forward(run_record([0.36] * 5, world_size=2, comm="gloo", batch=16,
                                    run_id="half"), 0.05)
    fsdp = _with_forward(run_record([0.36] * 5, world_size=2, comm="gloo", run_id="fsdp",
                                    strategy="fsdp"), 0.12)
    rows = {row.record["run_id"]: row for row in validate([ddp, half, fsdp], calibration)}
    assert rows["ddp2"].forward_drift == pytest.approx(0.10)
    assert table_rows([rows["ddp2"]])[0][HEADER.index("forward vs 1 rank")] == "+10.0%"
    assert rows["half"].forward_drift == pytest.approx(0.05 / (0.10 / 32 * 16) - 1)
    # fsdp all-gathers parameters inside its forward: no compute-only figure there
    assert rows["fsdp"].forward_drift is None and \
        table_rows([rows["fsdp"]])[0][HEADER.index("forward vs 1 rank")] == "-"
    # without a forward phase in the calibration run, no figure rather than a guess
    bare = run_record([0.32] * 5, threads=1, batch=32, run_id="single")
    (row,) = validate([ddp], [bare, *calibration[1:]])
    assert row.forward_drift is None


def test_fsdp_is_priced_with_its_single_rank_run(run_record, calibration) -> None:
    """The 1-rank fsdp run (gloo, the same thread) is calibration: never a row, and its
    0.40 s step less the compute's 0.32 s at batch 32 adds 80 ms to the 2-rank fsdp step."""
    fsdp2 = run_record([0.45] * 5, world_size=2, comm="gloo", strategy="fsdp", run_id="fsdp2")
    fsdp1 = run_record([0.40] * 5, comm="gloo", strategy="fsdp", run_id="fsdp1")
    (bare,) = validate([fsdp2, fsdp1], calibration)
    (priced,) = validate([fsdp2, fsdp1], [*calibration, fsdp1])
    assert bare.record["run_id"] == priced.record["run_id"] == "fsdp2"
    assert bare.predicted is not None and priced.predicted is not None
    assert priced.predicted == pytest.approx(bare.predicted + 0.08)
    assert bare.note == "" and priced.note == "fsdp's own work 80.0 ms a step, measured at 1 rank"
    assert priced.point is not None and priced.point.estimate is not None
    assert priced.point.estimate.overhead == pytest.approx(0.08)
    # the published table's layout holds where nothing is priced; a column appears where it is
    assert "| run | compute | communication | predicted | measured |" in \
        validation_markdown([bare], "cmd")
    markdown = validation_markdown([priced], "cmd")
    assert "| run | compute | communication | strategy's own work | predicted | measured |" \
        in markdown and "| 80.0 |" in markdown
