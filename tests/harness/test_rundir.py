"""The run directory: what the supervisor writes a rank reads back, and the other way."""
from __future__ import annotations

from pathlib import Path

import pytest

from harness.rundir import (
    RANK_VARIABLES,
    RUN_ID_VAR,
    SPEC_VAR,
    LostWorker,
    RankResult,
    RunDir,
    read_spec,
    spec_environment,
)
from harness.spec.specs import CommSpec, RunSpec

SPEC = RunSpec(workload="hep_cnn", size="tiny", batch_per_rank=4, steps=3, comm="gloo",
               nproc_per_node=2, strategy_options=(("bucket_mb", 5),), straggler=(1, 2.0))


@pytest.mark.parametrize("spec", [SPEC, CommSpec(ops=("allreduce", "broadcast"), sizes=(64,))])
def test_the_spec_reaches_the_rank_unchanged(spec: RunSpec | CommSpec) -> None:
    environment = spec_environment(spec, "run-1")
    assert environment[RUN_ID_VAR] == "run-1"
    assert {RUN_ID_VAR, SPEC_VAR} <= set(RANK_VARIABLES)
    assert read_spec(environment) == spec


def test_a_rank_without_a_spec_says_who_starts_ranks() -> None:
    with pytest.raises(RuntimeError, match="supervisor"):
        read_spec({})


def test_heartbeats_and_statuses_make_the_rank_states(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path)
    assert run_dir.rank_states() == {}
    run_dir.write_heartbeat(0, "measure", 2, 5)
    run_dir.write_heartbeat(1, "warmup", 1, 1)
    run_dir.write_status(1, "failed", "RuntimeError: x")
    states = run_dir.rank_states()
    assert (states[0].phase, states[0].done, states[0].total, states[0].status) == \
        ("measure", 2, 5, None)
    assert states[0].pid is not None and states[0].beat > 0
    assert (states[1].status, states[1].error) == ("failed", "RuntimeError: x")
    assert states[1].ended is not None
    with pytest.raises(ValueError, match="success"):
        run_dir.write_status(0, "fine")


def test_results_gathered_and_own(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path)
    assert not run_dir.has_results() and run_dir.read_results() is None
    ranks = [RankResult(rank=r, world_size=2, device_name="cpu", settings={"threads": 1},
                        step_times=[0.1, 0.2]) for r in range(2)]
    run_dir.write_results([ranks[0], {"rank": 1, "timings": []}])
    assert run_dir.has_results()
    gathered = run_dir.read_results()
    assert gathered is not None
    assert RankResult.from_dict(gathered[0]) == ranks[0] and gathered[1]["timings"] == []
    for rank in (10, 2):
        run_dir.write_own_result(rank, ranks[0])
    assert run_dir.result_path(10).exists()
    assert len(run_dir.read_own_results()) == 2


def test_lost_workers_reach_the_servers(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path)
    lost = LostWorker(rank=2, role="worker", time=1.0, steps=3, phase="measure",
                      reason="exit -9")
    run_dir.write_lost(lost)
    assert run_dir.lost_workers() == [lost]


def test_launcher_logs_in_the_order_started(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path)
    for index in (10, 2, 0):
        run_dir.launcher_log(index).write_text("x")
    assert [p.name for p in run_dir.launcher_logs()] == ["launcher-0.log", "launcher-2.log",
                                                         "launcher-10.log"]


def test_the_directory_goes_unless_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        ) -> None:
    gone = RunDir.create("a")
    gone.remove()
    assert not gone.path.exists()
    monkeypatch.setenv("DTBENCH_KEEP_RUN_DIR", "1")
    kept = RunDir.create("b")
    kept.remove()
    assert kept.path.is_dir()
    kept.path.rmdir()
    # a rank on a host that does not see node 0's directory reports into one of its own
    assert RunDir.join(tmp_path / "dtbench-b" / "elsewhere").path.is_dir()


def test_performance_variables_reach_every_node_through_mpirun() -> None:
    """NCCL_*, CUDA_*, TORCH_NCCL_*, OMP_* and GLOO_* set where dtbench runs are forwarded
    with -x, besides the rank variables; unrelated ones are not."""
    from backends.launchers import MpirunLauncher, is_open_mpi, mpirun_path
    from harness.rundir import forwarded_variables
    from harness.spec.specs import LaunchOptions, RunSpec, performance_env

    env = {"MASTER_PORT": "1", "NCCL_IB_HCA": "mlx5_0", "NCCL_DEBUG": "INFO",
           "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "CUDA_DEVICE_MAX_CONNECTIONS": "1",
           "OMP_PROC_BIND": "close", "GLOO_SOCKET_IFNAME": "eth1", "HOME": "/root",
           "DNNL_MAX_CPU_ISA": "AVX2", "PATH": "/usr/bin"}
    names = forwarded_variables(env)
    assert names == ["MASTER_PORT", "GLOO_SOCKET_IFNAME", "CUDA_DEVICE_MAX_CONNECTIONS",
                     "DNNL_MAX_CPU_ISA", "NCCL_DEBUG", "NCCL_IB_HCA", "OMP_PROC_BIND",
                     "TORCH_NCCL_ASYNC_ERROR_HANDLING"]
    # what is forwarded is what a record keeps as the run's environment
    assert set(names) - {"MASTER_PORT"} == set(performance_env(env))
    if mpirun_path() is None or not is_open_mpi(mpirun_path()):
        pytest.skip("no Open MPI mpirun here")
    (command,) = MpirunLauncher().commands(RunSpec(workload="lstm", nproc_per_node=2),
                                           LaunchOptions(), ["--run-dir", "x"], names)
    forwarded = [command.argv[i + 1] for i, arg in enumerate(command.argv) if arg == "-x"]
    assert forwarded == names
