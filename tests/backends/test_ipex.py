"""IPEX as an option of the cpu backend: never imported where it does not match torch (it
would exit the process), a skipped record with the reason where it is asked for and absent,
and (when the environment can be built) a real run under torch 2.8 with IPEX 2.8."""
from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from backends.ipex import ipex_availability
from harness.run.plan import plan_runs
from harness.run.preflight import unavailable_reason
from tests.conftest import REPO_ROOT

TINY = ("-w", "hep_cnn", "--size", "tiny", "--steps", "2", "--warmup", "1", "--threads", "1",
        "-q")
IPEX_PINS = ("torch==2.8.0", "intel-extension-for-pytorch==2.8.0")
BUILD_SECONDS = 600


def _fake_installed(monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    real = importlib.metadata.version

    def version_of(name: str) -> str:
        return version if name == "intel-extension-for-pytorch" else real(name)

    monkeypatch.setattr(importlib.metadata, "version", version_of)


def test_a_mismatched_ipex_is_refused_by_its_metadata(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_installed(monkeypatch, "2.8.0+cpu")
    verdict = ipex_availability("2.13.0+cpu")
    assert not verdict.available and "built for torch 2.8.*" in verdict.reason
    assert ipex_availability("2.8.0").available


def test_ipex_is_used_only_when_asked_or_measured_faster(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    cli = {"workload": ["hep_cnn"], "size": ["tiny"]}
    import torch

    _fake_installed(monkeypatch, torch.__version__)
    default = plan_runs(None, cli)[0][0]
    assert default.ipex is False and default.ipex_mode == "default"
    assert plan_runs(None, {**cli, "ipex": "on"})[0][0].ipex is True


def test_ipex_on_where_absent_or_unsupported_is_a_skip_with_the_reason(
        monkeypatch: pytest.MonkeyPatch) -> None:
    cli = {"workload": ["hep_cnn"], "size": ["tiny"], "ipex": "on"}
    _fake_installed(monkeypatch, "1.0.0")
    assert "built for torch 1.0.*" in unavailable_reason(plan_runs(None, cli)[0][0])
    import torch

    _fake_installed(monkeypatch, torch.__version__)
    fsdp = plan_runs(None, {**cli, "strategy": ["fsdp"], "nproc": [2]})[0][0]
    assert "fsdp strategy does not apply IPEX" in unavailable_reason(fsdp)


def test_ipex_on_without_ipex_writes_a_skipped_record(tmp_path: Path, run_cli) -> None:
    if ipex_availability().available:
        pytest.skip("IPEX is installed for this torch here")
    result = run_cli("run", *TINY, "--ipex", "on", "--out", "store", "--json", "r.json")
    assert result.returncode == 4, result.stderr
    (record,) = json.loads((tmp_path / "r.json").read_text())
    assert record["status"] == "skipped"
    assert record["error"].startswith("--ipex on: intel-extension-for-pytorch")
    assert "Traceback" not in result.stderr


def _ipex_python(tmp_root: Path) -> Path:
    """A venv with torch 2.8, IPEX 2.8 and dtbench: DTBENCH_IPEX_PYTHON, or built (once per
    cache folder) within BUILD_SECONDS; a skip with the reason where it cannot be built."""
    given = os.environ.get("DTBENCH_IPEX_PYTHON")
    if given:
        return Path(given)
    venv = Path(os.environ.get("DTBENCH_IPEX_VENV") or tmp_root / "venv-ipex")
    python = venv / "bin" / "python"
    marker = venv / ".dtbench-ready"
    if marker.exists():
        return python
    started = time.monotonic()
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True,
                       capture_output=True, timeout=120)
        # One resolution for both, and no byte-compiling of torch's ~10k modules at install
        # (the few a run imports compile on first use): ~2.2 min here against ~3.2.
        left = BUILD_SECONDS - (time.monotonic() - started)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-compile",
                        *IPEX_PINS, "-e", str(REPO_ROOT)],
                       check=True, capture_output=True, text=True, timeout=max(1, left))
    except subprocess.TimeoutExpired:
        pytest.skip(f"the ipex environment ({' '.join(IPEX_PINS)}) did not build within "
                    f"{BUILD_SECONDS} s")
    except subprocess.CalledProcessError as exc:
        tail = " ".join(str(exc.stderr or "").split()[-30:])
        pytest.skip(f"the ipex environment ({' '.join(IPEX_PINS)}) could not be built: {tail}")
    marker.write_text("ok\n")
    return python


@pytest.fixture(scope="module")
def ipex_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _ipex_python(tmp_path_factory.mktemp("ipex"))


def _run_in(python: Path, tmp_path: Path, seeded_cache_dir: Path, *args: str) -> dict:
    env = {**os.environ, "DTBENCH_CACHE_DIR": str(seeded_cache_dir)}
    result = subprocess.run([str(python), "-m", "harness", "run", *args, "--out", "store",
                             "--json", "r.json"], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    (record,) = json.loads((tmp_path / "r.json").read_text())
    return record


# Building the torch 2.8 + IPEX environment takes 2.5 minutes on 2 cores, an eighth of CI's
# default-run budget: these two run where the environment exists (`tox -e ipex`, or
# DTBENCH_IPEX_PYTHON set) and in the full run (`--matrix`, which builds it).
IPEX_ENV = [] if os.environ.get("DTBENCH_IPEX_PYTHON") else [pytest.mark.matrix]


@pytest.mark.parametrize("_", [pytest.param(None, marks=IPEX_ENV, id="ipex-env")])
def test_training_with_ipex_under_torch_2_8(_: None, ipex_python: Path, tmp_path: Path,
                                           seeded_cache_dir: Path) -> None:
    """The cpu backend trains through ipex.optimize, and the record names both versions."""
    record = _run_in(ipex_python, tmp_path, seeded_cache_dir, *TINY, "--ipex", "on")
    assert record["status"] == "success", record.get("error")
    assert record["software"]["torch"].startswith("2.8.")
    assert record["software"]["ipex"].startswith("2.8.")
    assert record["notes"]["settings"]["ipex"] == record["software"]["ipex"]
    assert record["spec"]["ipex"] is True
    names = {metric["name"] for metric in record["metrics"]}
    assert {"throughput", "step_time", "first_step_time"} <= names


@pytest.mark.parametrize("_", [pytest.param(None, marks=IPEX_ENV, id="ipex-env")])
def test_core_paths_under_torch_2_8(_: None, ipex_python: Path, tmp_path: Path,
                                    seeded_cache_dir: Path) -> None:
    """The oldest supported torch: two gloo ranks of ddp without IPEX, replicas checked."""
    record = _run_in(ipex_python, tmp_path, seeded_cache_dir, *TINY, "-n", "2", "--ipex", "off")
    assert record["status"] == "success", record.get("error")
    assert record["software"]["torch"].startswith("2.8.")
    assert record["spec"]["ipex"] is False and record["spec"]["world_size"] == 2
    assert record["notes"]["settings"]["ipex"] is False


def test_bf16_ipex_needs_the_instructions_its_prepacking_asserts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On an AVX2-only CPU (AMD Zen 3) ipex.optimize(dtype=bfloat16) stops on an assertion:
    auto leaves IPEX off for bf16 there, and --ipex on is a skip naming the instructions."""
    import torch

    _fake_installed(monkeypatch, torch.__version__)
    avx2 = frozenset({"avx2", "fma"})
    avx512 = frozenset({"avx2", "avx512f", "avx512bw", "avx512vl", "avx512dq"})
    assert ipex_availability(precision="fp32", flags=avx2).available
    verdict = ipex_availability(precision="bf16", flags=avx2)
    assert not verdict.available and "avx512bw+avx512vl+avx512dq" in verdict.reason
    assert ipex_availability(precision="bf16", flags=avx512).available
    assert ipex_availability(precision="bf16", flags=frozenset({"avx_ne_convert"})).available
