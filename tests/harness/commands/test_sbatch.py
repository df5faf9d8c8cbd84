"""sbatch script generation (harness/run/sbatch.py, through the command in
harness/commands/sbatch.py): its #SBATCH lines, command, checks.

Submitting a generated script to a real one-node cluster is in
tests/distributed/test_slurm.py (`sbatch --wait`).
"""
from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.commands.options import Parser
from harness.commands.sbatch import add_arguments, command, write_sbatch
from harness.core.errors import UsageError
from harness.run.sbatch import parse_sbatch_lines

SUITE_TOML = """
name = "scaling"
description = "ranks 1, 2 and 4"

[defaults]
workload = "hep_cnn"
size = "tiny"
threads = 3

[[runs]]
nproc = [1, 2, 4]
comm = "gloo"
"""


def exec_line(script: str) -> list[str]:
    """The argv of the script's `exec` line, as bash would split it ($(...) kept as text)."""
    [line] = [ln for ln in script.splitlines() if ln.startswith("exec ")]
    return shlex.split(line)[1:]


def cli(*argv: str) -> argparse.Namespace:
    parser = Parser(prog="dtbench sbatch")
    add_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.fixture
def suite_file(tmp_path: Path) -> Path:
    path = tmp_path / "scaling.toml"
    path.write_text(SUITE_TOML)
    return path


def test_builtin_suite_script_has_every_sbatch_line() -> None:
    script = write_sbatch("quick")
    assert script.startswith("#!/bin/bash\n")
    options = parse_sbatch_lines(script)
    assert options == {"--job-name": "dtbench-quick", "--nodes": "1",
                       "--ntasks-per-node": "1", "--cpus-per-task": "1",
                       "--time": "01:00:00", "--output": "dtbench-%x-%j.out"}
    argv = exec_line(script)
    assert argv[:3] == ["dtbench", "run", "quick"]
    assert argv[argv.index("--launcher") + 1] == "slurm"
    assert argv[argv.index("--threads") + 1] == "1"
    assert argv[argv.index("--out") + 1] == ".dtbench"
    assert argv[-1] == "-q"
    assert "--master-addr" not in argv


def test_options_become_sbatch_lines_and_run_options(tmp_path: Path) -> None:
    script = write_sbatch("quick", nodes=2, ntasks_per_node=4, cpus_per_task=8,
                          gpus_per_node=4, time="1-12:00:00", job_name="bench",
                          log="logs/%j.txt", partition="gpu", account="proj1",
                          out_dir="store dir", json_file="out.json",
                          run_args=["--size", "tiny", "--steps", "20"],
                          dtbench="/opt/venv/bin/dtbench", chdir=str(tmp_path),
                          extra_sbatch=["--exclusive", "--qos=high"])
    options = parse_sbatch_lines(script)
    assert options == {"--job-name": "bench", "--nodes": "2", "--ntasks-per-node": "4",
                       "--cpus-per-task": "8", "--gpus-per-node": "4",
                       "--time": "1-12:00:00", "--output": "logs/%j.txt",
                       "--partition": "gpu", "--account": "proj1", "--chdir": str(tmp_path),
                       "--exclusive": "", "--qos": "high"}
    argv = exec_line(script)
    assert argv[0] == "/opt/venv/bin/dtbench"
    assert argv[argv.index("--threads") + 1] == "8"
    assert argv[argv.index("--out") + 1] == "store dir"   # quoted for the shell
    assert argv[argv.index("--json") + 1] == "out.json"
    assert argv[argv.index("--nnodes") + 1] == "2"
    assert argv[argv.index("-n") + 1] == "4"
    assert argv[argv.index("--size") + 1] == "tiny"
    # Several nodes: the rendezvous is on the batch host, which the other nodes can reach.
    assert argv[argv.index("--master-addr") + 1] == "$(hostname)"
    assert '--master-addr "$(hostname)"' in script


def test_suite_file_sizes_the_allocation_and_keeps_its_runs(suite_file: Path) -> None:
    script = write_sbatch(str(suite_file))
    options = parse_sbatch_lines(script)
    assert options["--job-name"] == "dtbench-scaling"
    assert options["--ntasks-per-node"] == "4"      # the largest of nproc = [1, 2, 4]
    assert options["--cpus-per-task"] == "3"        # the suite's threads
    argv = exec_line(script)
    assert argv[2] == str(suite_file.resolve())      # absolute: the job may start elsewhere
    assert "-n" not in argv and "--nnodes" not in argv   # every size of the suite runs
    assert "3 planned run(s)" in script


def test_relative_suite_path_is_made_absolute(suite_file: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(suite_file.parent)
    assert exec_line(write_sbatch(suite_file.name))[2] == str(suite_file.resolve())


def test_run_args_comma_list_in_an_allocation_for_the_largest() -> None:
    script = write_sbatch("quick", run_args=["-n", "1,2", "--size", "tiny"])
    assert parse_sbatch_lines(script)["--ntasks-per-node"] == "2"
    assert exec_line(script)[-4:] == ["1,2", "--size", "tiny", "-q"]


@pytest.mark.parametrize("kwargs, message", [
    ({"time": "an hour"}, "time"),
    ({"time": "1:2:3:4"}, "time"),
    ({"nodes": 0}, "nodes"),
    ({"cpus_per_task": -1}, "cpus_per_task"),
    ({"job_name": "two words"}, "job name"),
    ({"partition": "gpu\n#SBATCH --x"}, "partition"),
    ({"run_args": ["--launcher", "local"]}, "--launcher"),
    ({"run_args": ["--threads=4"]}, "cpus_per_task"),
    ({"run_args": ["--out", "x"]}, "out_dir"),
    ({"run_args": ["--no-such-option"]}, "unrecognized"),
    ({"run_args": ["-w", "nosuch"]}, "nosuch"),
    ({"ntasks_per_node": 1, "run_args": ["-n", "2"]}, "allocation has 1 x 1"),
    ({"dtbench": ""}, "dtbench command"),
])
def test_bad_input_is_a_usage_error(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        write_sbatch("quick", **kwargs)  # type: ignore[arg-type]


def test_unknown_suite_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="unknown suite"):
        write_sbatch("no-such-suite")
    with pytest.raises(UsageError, match="no such file"):
        write_sbatch(str(tmp_path / "missing.toml"))


def test_parse_sbatch_lines_stops_at_the_first_command() -> None:
    script = "#!/bin/bash\n# comment\n#SBATCH --nodes=2 --exclusive\necho hi\n#SBATCH --time=5\n"
    assert parse_sbatch_lines(script) == {"--nodes": "2", "--exclusive": ""}


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_script_is_valid_bash(tmp_path: Path, suite_file: Path) -> None:
    path = tmp_path / "job.sh"
    path.write_text(write_sbatch(str(suite_file), nodes=2, json_file="r.json"))
    result = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stderr


def test_command_prints_the_script(capsys: pytest.CaptureFixture[str]) -> None:
    assert command(cli("quick", "--nodes", "2", "--run", "--size tiny --steps 5")) == 0
    script = capsys.readouterr().out
    assert parse_sbatch_lines(script)["--nodes"] == "2"
    argv = exec_line(script)
    assert argv[argv.index("--steps") + 1] == "5"


def test_command_writes_an_executable_file(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "job.sh"
    args = cli("quick", "--script", str(target), "--time", "30", "--partition", "debug",
               "--run=-q", "--log", "out-%j.txt")
    assert command(args) == 0
    assert target.stat().st_mode & 0o111
    options = parse_sbatch_lines(target.read_text())
    assert options["--time"] == "30" and options["--partition"] == "debug"
    assert options["--output"] == "out-%j.txt"
    assert "sbatch" in capsys.readouterr().err


def test_command_bad_output_and_run_options_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        command(cli("quick", "--script", str(tmp_path / "nope" / "job.sh")))
    with pytest.raises(UsageError, match="is a directory"):
        command(cli("quick", "--script", str(tmp_path)))
    with pytest.raises(UsageError, match="--run"):
        command(cli("quick", "--run", "--size 'tiny"))


def test_the_older_output_spelling_still_writes_the_script(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """-o/--output named the script before --script; it still does, with a note."""
    for flag in ("-o", "--output"):
        target = tmp_path / f"job{flag}.sh"
        assert command(cli("quick", flag, str(target))) == 0
        assert target.read_text().startswith("#!/bin/bash")
        assert f"{flag} is deprecated; write --script" in capsys.readouterr().err


def test_a_store_url_with_a_password_never_lands_in_the_script() -> None:
    with pytest.raises(UsageError, match="PGPASSWORD") as refused:
        write_sbatch("quick", out_dir="postgresql://ci:s3cret@db.example/bench")
    assert "s3cret" not in str(refused.value)
    script = write_sbatch("quick", out_dir="postgresql://ci@db.example/bench")
    assert "--out postgresql://ci@db.example/bench" in script


def test_a_gpu_script_asks_for_whole_nodes_not_one_cpu_per_rank() -> None:
    """With GPUs and no --cpus-per-task, the script asks for the node (--exclusive) and sets
    no --threads: srun gives each GPU rank the node's CPUs divided among its ranks."""
    script = write_sbatch("quick", nodes=1, ntasks_per_node=4, gpus_per_node=4)
    options = parse_sbatch_lines(script)
    assert "--cpus-per-task" not in options and options["--exclusive"] == ""
    assert "--threads" not in exec_line(script)
    given = parse_sbatch_lines(write_sbatch("quick", gpus_per_node=4, cpus_per_task=6))
    assert given["--cpus-per-task"] == "6" and "--exclusive" not in given


def test_srun_gives_a_gpu_rank_its_share_of_the_node() -> None:
    from backends.launchers import srun_cpus_per_task
    from harness.spec.specs import RunSpec

    gpu = RunSpec(workload="resnet50", backend="cuda", comm="nccl", nproc_per_node=4)
    assert srun_cpus_per_task(gpu, {"SLURM_CPUS_ON_NODE": "64"}) == 16
    assert srun_cpus_per_task(gpu.replace(threads=3), {"SLURM_CPUS_ON_NODE": "64"}) == 3
    assert srun_cpus_per_task(gpu.replace(backend="cpu", comm="gloo"), {}) == 1
    assert srun_cpus_per_task(gpu.replace(nproc_per_node=128),
                              {"SLURM_CPUS_ON_NODE": "64"}) == 1


def test_a_gpu_script_gives_every_gpu_rank_its_own_gpu() -> None:
    """Fewer GPUs than GPU ranks per node would put two ranks on one GPU (srun binds one per
    rank): refused; as many passes."""
    run = ["-w", "hep_cnn", "--backend", "cuda", "--comm", "nccl", "-n", "4"]
    with pytest.raises(UsageError, match="4 GPU rank"):
        write_sbatch("quick", gpus_per_node=2, run_args=run)
    assert parse_sbatch_lines(write_sbatch("quick", gpus_per_node=4,
                                           run_args=run))["--gpus-per-node"] == "4"
