"""Puts the repository root on sys.path so tests import `backends`, `harness`, `workloads`;
shared fixtures for every test directory."""
import functools
import os
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.slowrule import fast_tests_start_no_process  # noqa: E402,F401  (autouse guard)

PeakSeeder = Callable[[Path, float, Iterable[int]], None]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--matrix", action="store_true", default=False,
                     help="also run the full strategy x workload x comm x launcher matrix "
                     "(tests marked matrix; about an hour on 2 cores)")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that start a process are marked `slow` by rule (tests/slowrule.py), before `-m`
    selects; tests marked `matrix` run only with --matrix (or DTBENCH_MATRIX=1)."""
    from tests.slowrule import mark_slow

    mark_slow(items)
    if config.getoption("--matrix") or os.environ.get("DTBENCH_MATRIX") == "1":
        return
    kept, dropped = [], []
    for item in items:
        (dropped if item.get_closest_marker("matrix") else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def pytest_configure(config: pytest.Config) -> None:
    """Every test, and every dtbench process a test starts, gets a private peak cache (never
    the user's ~/.cache/dtbench) and takes the cached peak by default: timing the GEMM peak
    in every run would add seconds to each; the tests of in-run peaks ask for it."""
    import tempfile

    from harness.machine.fingerprint import mpi_version

    mpi_version()  # the one child process every record's fingerprint asks, asked here once
    folder = tempfile.mkdtemp(prefix="dtbench-test-cache-")
    config.stash[_CACHE_KEY] = folder
    os.environ["DTBENCH_CACHE_DIR"] = folder
    os.environ["DTBENCH_PEAK"] = "cached"
    # a command given no store uses .dtbench in its working directory, never the user's own
    os.environ.pop("DTBENCH_STORE", None)


def pytest_unconfigure(config: pytest.Config) -> None:
    import shutil

    folder = config.stash.get(_CACHE_KEY, None)
    if folder:
        shutil.rmtree(folder, ignore_errors=True)


_CACHE_KEY = pytest.StashKey[str]()


@pytest.fixture(scope="session")
def seed_peak_cache() -> PeakSeeder:
    """Writes a fake cpu/fp32 peak into a cache folder, so runs pointed at it (through
    DTBENCH_CACHE_DIR) spend no time timing GEMMs."""

    def seed(folder: Path, flops: float, threads: Iterable[int]) -> None:
        import torch

        from backends.cpu import CPUBackend
        from harness.microbench import peak

        saved = os.environ.get("DTBENCH_CACHE_DIR")
        os.environ["DTBENCH_CACHE_DIR"] = str(folder)
        try:
            device_name = CPUBackend().device_name(torch.device("cpu"))
            for count in threads:
                peak.store_peak(peak.PeakResult(
                    backend="cpu", device_name=device_name, precision="fp32", threads=count,
                    flops=flops, memory_bandwidth=1.0e10, per_size={"1024": flops},
                    measured_at="2024-01-01T00:00:00+00:00", torch=torch.__version__))
                assert peak.cached_peak("cpu", device_name, "fp32", count) is not None
        finally:
            if saved is None:
                os.environ.pop("DTBENCH_CACHE_DIR", None)
            else:
                os.environ["DTBENCH_CACHE_DIR"] = saved

    return seed


REPO_ROOT = Path(__file__).resolve().parents[1]

# A fixed, obviously fake peak: runs read it from the cache instead of spending ~10 s of both
# cores on GEMMs, and tests can check that mfu is achieved_flops divided by exactly this.
SEEDED_PEAK_FLOPS = 1.0e11
CLI_THREADS = 1


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty peak cache for in-process tests, never the user's ~/.cache/dtbench."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("DTBENCH_CACHE_DIR", str(folder))
    return folder


@pytest.fixture(scope="session")
def seeded_cache_dir(tmp_path_factory: pytest.TempPathFactory,
                     seed_peak_cache: Callable[..., None]) -> Iterator[Path]:
    """A peak cache holding SEEDED_PEAK_FLOPS for cpu/fp32 at CLI_THREADS threads."""
    folder = tmp_path_factory.mktemp("peak-cache")
    seed_peak_cache(folder, SEEDED_PEAK_FLOPS, (CLI_THREADS,))
    yield folder


@pytest.fixture(scope="session")
def seeded_peak_flops() -> float:
    """The peak FLOP/s that `seeded_cache_dir` holds."""
    return SEEDED_PEAK_FLOPS


CliRunner = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="session")
def cli_runner(seeded_cache_dir: Path) -> CliRunner:
    """Run `python -m harness ARGS` in `cwd` with the seeded peak cache."""

    def run(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ)
        env["DTBENCH_CACHE_DIR"] = str(seeded_cache_dir)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT),
                                                           env.get("PYTHONPATH")]))
        return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, env=env,
                              capture_output=True, text=True, timeout=timeout, check=False)

    return run


@pytest.fixture
def run_cli(tmp_path: Path, cli_runner: CliRunner) -> CliRunner:
    """`cli_runner` with the test's tmp_path as the working directory."""
    return functools.partial(cli_runner, cwd=tmp_path)
