"""Each launcher reads its own failure output: which rank a signal killed, whose a line is."""
from __future__ import annotations

import signal

import pytest

from backends.base import Launcher, killed_by_cause
from backends.launchers import LocalLauncher, MpirunLauncher, SlurmLauncher, TorchrunLauncher
from harness.spec.specs import LaunchOptions, RunSpec

TORCHRUN, MPIRUN, SRUN, LOCAL = (TorchrunLauncher(), MpirunLauncher(), SlurmLauncher(),
                                 LocalLauncher())

RULE = "-" * 55


def entry(index: int, rank: int, code: int, note: str = "") -> str:
    return (f"[{index}]:\n  time      : 2026-11-22_02:34:43\n  host      : localhost\n"
            f"  rank      : {rank} (local_rank: {rank})\n"
            f"  exitcode  : {code} (pid: {27555 + rank}){note}\n  error_file: <N/A>\n")


def report(root: str, others: list[str]) -> str:
    """torchrun's report as torchrun 2.13 prints it: other failures first, then the root
    cause."""
    failures = "\n".join(others) if others else "  <NO_OTHER_FAILURES>\n"
    return (f"E1122 some earlier line about rank 7 exitcode -9\n{RULE}\nw.py FAILED\n{RULE}\n"
            f"Failures:\n{failures}{RULE}\nRoot Cause (first observed failure):\n{root}"
            f"{'=' * 55}\n")


@pytest.mark.parametrize("launcher", [TORCHRUN, MPIRUN, SRUN, LOCAL], ids=lambda x: x.name)
def test_no_report_yet(launcher: Launcher) -> None:
    assert launcher.killed_ranks("") == []
    assert launcher.failure_reason("W1122 starting 2 processes\n") is None


def test_an_error_exit_is_not_a_kill() -> None:
    assert TORCHRUN.killed_ranks(report(entry(0, 1, 1), [])) == []


def test_killed_root_cause_and_the_ranks_torchrun_stopped() -> None:
    """The usual case, as torchrun printed it for a SIGKILLed rank 1."""
    text = report(entry(0, 1, -9, "  (SIGKILL)"), [entry(1, 0, -15, "  (SIGTERM)")])
    assert TORCHRUN.killed_ranks(text) == [(1, -9)]
    assert TORCHRUN.failure_reason(text) == "rank 1 killed by SIGKILL (torchrun)"


def test_a_killed_rank_is_found_where_torchrun_named_a_peer() -> None:
    """The race seen in CI: rank 0 failed on the broken connection and wrote its error file
    before torchrun noticed that rank 1 had been killed, so torchrun named rank 0."""
    text = report(entry(0, 0, 1), [entry(1, 1, -9, "  (SIGKILL)")])
    assert TORCHRUN.killed_ranks(text) == [(1, -9)]


def test_root_cause_first() -> None:
    text = report(entry(0, 1, -11, "  (SIGSEGV)"), [entry(1, 0, -9, "  (SIGKILL)")])
    assert TORCHRUN.killed_ranks(text) == [(1, -11), (0, -9)]
    assert TORCHRUN.failure_reason(text) == "rank 1 killed by SIGSEGV (torchrun)"


def test_aborts_and_stops_are_consequences() -> None:
    """gloo aborts (SIGABRT) a rank whose peer vanished mid-collective; torchrun stops the
    rest with SIGTERM. Neither names the cause."""
    aborted = entry(0, 0, -6, "  (SIGABRT)")
    assert TORCHRUN.killed_ranks(report(aborted, [entry(1, 1, 1)])) == []
    stopped = report(entry(0, 0, 1), [entry(1, 1, -15, "  (SIGTERM)")])
    assert TORCHRUN.killed_ranks(stopped) == []


def test_open_mpi_report() -> None:
    """As Open MPI 5 (prterun) printed it for a SIGKILLed rank 1, line break included."""
    text = ("-" * 74 + "\nprterun noticed that process rank 1 with PID 2715 on node vm exited "
            "on\nsignal 9 (Killed).\n" + "-" * 74 + "\n")
    assert MPIRUN.killed_ranks(text) == [(1, -9)]
    assert MPIRUN.failure_reason(text) == "rank 1 killed by SIGKILL (mpirun)"
    older = "mpirun noticed that process rank 0 with PID 77 on node n1 exited on signal 6"
    assert MPIRUN.killed_ranks(older) == []
    # another launcher's report is not read as its own
    assert TORCHRUN.killed_ranks(text) == [] and SRUN.killed_ranks(text) == []


def test_signal_classes() -> None:
    assert killed_by_cause(-signal.SIGKILL) and killed_by_cause(-signal.SIGSEGV)
    assert not killed_by_cause(-signal.SIGABRT) and not killed_by_cause(-signal.SIGTERM)
    assert not killed_by_cause(1) and not killed_by_cause(0)


def test_srun_report() -> None:
    """As srun (Slurm 24) printed it for a SIGKILLed and for an aborted task 1."""
    killed = ("salloc: Granted job allocation 1\nsrun: error: vm: task 1: Killed\n"
              "srun: Force Terminated StepId=1.0\n")
    assert SRUN.killed_ranks(killed) == [(1, -9)]
    assert SRUN.failure_reason(killed) == "rank 1 killed by SIGKILL (slurm)"
    assert SRUN.killed_ranks("srun: error: vm: task 1: Aborted\n") == []
    assert SRUN.killed_ranks("srun: error: vm: task 1: Exited with exit code 3\n") == []
    assert SRUN.killed_ranks("srun: error: n2: tasks 0,2-3: Segmentation fault (core dumped)\n"
                             ) == [(0, -11), (2, -11), (3, -11)]
    assert SRUN.killed_ranks("srun: error: vm: tasks 0-1: Terminated\n") == []
    assert MPIRUN.killed_ranks(killed) == [] and TORCHRUN.killed_ranks(killed) == []


def test_the_local_launcher_reads_no_report() -> None:
    """Its ranks' exit codes reach the supervisor directly; its logs hold one rank each."""
    text = report(entry(0, 1, -9, "  (SIGKILL)"), [])
    assert LOCAL.killed_ranks(text) == [] and LOCAL.failure_reason(text) is None
    assert not LOCAL.names_killed_ranks
    assert LOCAL.rank_lines(["[rank1]:boom"], 1) == []


def test_torchrun_marks_each_ranks_lines() -> None:
    lines = ["[rank0]:Traceback (most recent call last):", "[rank1]:RuntimeError: x", "plain"]
    assert TORCHRUN.rank_lines(lines, 1) == ["RuntimeError: x"]
    assert TORCHRUN.rank_lines(lines, 2) == []
    assert TORCHRUN.names_killed_ranks and SRUN.names_killed_ranks


# -- GPU placement in the generated commands ---------------------------------------------------
GPU_SPEC = RunSpec(workload="resnet50", backend="cuda", comm="nccl", nproc_per_node=4)
RANK_ARGS = ["--run-dir", "/tmp/run"]


def _value(argv: list[str], option: str) -> str | None:
    found = [arg.split("=", 1)[1] for arg in argv if arg.startswith(option + "=")]
    return found[0] if found else None


def test_srun_gives_each_gpu_rank_a_gpu_its_peers_and_its_cores(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """One GPU per rank on each node, all of the step's GPUs visible to every task (NVLink
    peer-to-peer kept under device cgroups), no CPU binding of srun's own choosing, the
    node's CPUs divided among its GPU ranks."""
    monkeypatch.setenv("SLURM_CPUS_ON_NODE", "64")
    (command,) = SRUN.commands(GPU_SPEC.replace(nnodes=2, launcher="slurm"), LaunchOptions(),
                               RANK_ARGS, [])
    argv = command.argv
    assert _value(argv, "--gpus-per-node") == "4" and _value(argv, "--gpu-bind") == "none"
    assert _value(argv, "--cpu-bind") == "none" and _value(argv, "--cpus-per-task") == "16"
    (cpu,) = SRUN.commands(GPU_SPEC.replace(backend="cpu", comm="gloo", launcher="slurm"),
                           LaunchOptions(), RANK_ARGS, [])
    assert not any(arg.startswith(("--gpus-per-node", "--gpu-bind")) for arg in cpu.argv)


def test_mpirun_keeps_a_hosts_gpu_list_on_that_host(monkeypatch: pytest.MonkeyPatch) -> None:
    from backends import launchers

    monkeypatch.setattr(launchers, "mpirun_path", lambda: "/usr/bin/mpirun")
    monkeypatch.setattr(launchers, "is_open_mpi", lambda path: True)
    forward = ["MASTER_PORT", "CUDA_VISIBLE_DEVICES", "NCCL_DEBUG"]
    spec = GPU_SPEC.replace(launcher="mpirun")

    def exported(nnodes: int) -> list[str]:
        (command,) = MPIRUN.commands(spec.replace(nnodes=nnodes), LaunchOptions(hostfile="h"),
                                     RANK_ARGS, forward)
        return [command.argv[i + 1] for i, arg in enumerate(command.argv) if arg == "-x"]

    assert exported(2) == ["MASTER_PORT", "NCCL_DEBUG"]
    assert exported(1) == forward  # one host: its own list


@pytest.mark.parametrize("binds", [True, False])
def test_torchrun_binds_gpu_ranks_to_their_numa_node_where_it_can(
        monkeypatch: pytest.MonkeyPatch, binds: bool) -> None:
    from backends import launchers
    from backends.numa import BOUND_BY_VAR

    monkeypatch.setattr(launchers, "torchrun_binds_numa", lambda: binds)
    launch = LaunchOptions(master_addr="node0", master_port=29500)
    (command,) = TORCHRUN.commands(GPU_SPEC.replace(launcher="torchrun"), launch, RANK_ARGS, [])
    flag = command.argv[command.argv.index("--numa-binding") + 1] \
        if "--numa-binding" in command.argv else None
    assert flag == ("exclusive" if binds else None)
    # torchrun's own options, then the rank's module
    assert command.argv.index("harness.rank.main") > command.argv.index("--monitor-interval")
    if binds:
        assert command.argv.index("harness.rank.main") > command.argv.index("--numa-binding")
    assert (BOUND_BY_VAR in command.env) == binds  # the rank then leaves its placement alone
    (cpu,) = TORCHRUN.commands(GPU_SPEC.replace(backend="cpu", comm="gloo",
                                                launcher="torchrun"), launch, RANK_ARGS, [])
    assert "--numa-binding" not in cpu.argv


def test_this_torchruns_parser_takes_the_binding_dtbench_passes() -> None:
    from torch.distributed.run import get_args_parser

    from backends.launchers import NUMA_MODE

    args = get_args_parser().parse_args(["--numa-binding", NUMA_MODE, "train.py"])
    assert args.numa_binding == NUMA_MODE
