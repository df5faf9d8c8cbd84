"""Shared fixtures of the harness tests: a CLI runner in a subprocess and an isolated peak cache."""
from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

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
    """Run `python -m harness.cli ARGS` in `cwd` with the seeded peak cache."""

    def run(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ)
        env["DTBENCH_CACHE_DIR"] = str(seeded_cache_dir)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT),
                                                           env.get("PYTHONPATH")]))
        return subprocess.run([sys.executable, "-m", "harness.cli", *args], cwd=cwd, env=env,
                              capture_output=True, text=True, timeout=timeout, check=False)

    return run


@pytest.fixture
def run_cli(tmp_path: Path, cli_runner: CliRunner) -> CliRunner:
    """`cli_runner` with the test's tmp_path as the working directory."""
    return functools.partial(cli_runner, cwd=tmp_path)
