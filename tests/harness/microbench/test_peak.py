"""Measured peak: a small real measurement, and the per-machine cache that MFU reads."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from harness.microbench import peak
from harness.microbench.peak import PeakResult, cached_peak, measure_peak, peak_for, store_peak


@pytest.fixture
def keep_threads() -> Iterator[None]:
    saved = torch.get_num_threads()
    yield
    torch.set_num_threads(saved)


def fake(flops: float = 5e10, threads: int = 1, precision: str = "fp32") -> PeakResult:
    return PeakResult(backend="cpu", device_name="Test CPU", precision=precision,
                      threads=threads, flops=flops, memory_bandwidth=1e10,
                      per_size={"64": flops}, measured_at="2024-01-01T00:00:00+00:00",
                      torch=torch.__version__)


def test_cache_dir_follows_the_environment(monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    monkeypatch.setenv("DTBENCH_CACHE_DIR", str(tmp_path / "a"))
    assert peak.cache_dir() == tmp_path / "a"
    monkeypatch.delenv("DTBENCH_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert peak.cache_dir() == tmp_path / "xdg" / "dtbench"


def test_measure_peak_on_small_sizes(monkeypatch: pytest.MonkeyPatch,
                                     keep_threads: None) -> None:
    monkeypatch.setitem(peak.GEMM_SIZES, "cpu", (32, 64))
    monkeypatch.setitem(peak.COPY_BYTES, "cpu", 64 * 1024)
    result = measure_peak("cpu", "fp32", threads=1, reps=2)
    assert (result.backend, result.precision, result.threads) == ("cpu", "fp32", 1)
    # Both CPU GEMM engines (MKL/torch.mm and oneDNN via a 1x1 convolution) at both sizes.
    assert set(result.per_size) == {"mm 32", "mm 64", "onednn 32", "onednn 64"}
    assert result.flops == max(result.per_size.values()) > 0
    assert result.memory_bandwidth > 0
    assert result.torch == torch.__version__


def test_store_and_read_back(cache_dir: Path) -> None:
    assert cached_peak("cpu", "Test CPU", "fp32", 1) is None
    store_peak(fake(threads=1))
    store_peak(fake(flops=7e10, threads=2))
    assert cached_peak("cpu", "Test CPU", "fp32", 1) == fake(threads=1)
    assert cached_peak("cpu", "Test CPU", "fp32", 2).flops == 7e10
    assert cached_peak("cpu", "Test CPU", "bf16", 1) is None
    assert cached_peak("cpu", "Other CPU", "fp32", 1) is None


def test_corrupt_cache_is_ignored_and_replaced(cache_dir: Path) -> None:
    cache_dir.mkdir(parents=True)
    (cache_dir / "peak.json").write_text("{not json")
    assert cached_peak("cpu", "Test CPU", "fp32", 1) is None
    store_peak(fake())
    assert cached_peak("cpu", "Test CPU", "fp32", 1) == fake()


def test_unwritable_cache_only_costs_a_remeasure(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    monkeypatch.setenv("DTBENCH_CACHE_DIR", str(tmp_path / "afile" / "cache"))
    store_peak(fake())
    assert cached_peak("cpu", "Test CPU", "fp32", 1) is None


def test_peak_for_uses_the_cache(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store_peak(fake())

    def forbidden(*args: object, **kwargs: object) -> PeakResult:
        raise AssertionError("measured although a cached peak exists")

    monkeypatch.setattr(peak, "measure_peak", forbidden)
    assert peak_for("cpu", "Test CPU", "fp32", 1) == fake()


def test_peak_for_measures_once_and_caches(cache_dir: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, str, int]] = []

    def measure(name: str, precision: str, threads: int = 0, **where: object) -> PeakResult:
        calls.append((name, precision, threads))
        return fake(threads=threads)

    monkeypatch.setattr(peak, "measure_peak", measure)
    assert peak_for("cpu", "Test CPU", "fp32", 1) == fake()
    assert peak_for("cpu", "Test CPU", "fp32", 1) == fake()
    assert calls == [("cpu", "fp32", 1)]


def test_store_keeps_the_best_measurement(cache_dir: Path) -> None:
    from harness.microbench.peak import PeakResult, store_peak

    def result(flops: float) -> PeakResult:
        return PeakResult(backend="cpu", device_name="Test CPU", precision="bf16", threads=2,
                          flops=flops, memory_bandwidth=1e10, per_size={"mm 64": flops},
                          measured_at="2026-01-01T00:00:00+00:00", torch=torch.__version__)

    assert store_peak(result(7e11)).flops == 7e11
    # A later measurement in a slow moment does not replace the better one...
    assert store_peak(result(4e11)).flops == 7e11
    assert cached_peak("cpu", "Test CPU", "bf16", 2).flops == 7e11
    # ...and a better one does.
    assert store_peak(result(8e11)).flops == 8e11
    assert cached_peak("cpu", "Test CPU", "bf16", 2).flops == 8e11


def test_measuring_the_peak_draws_nothing_from_the_training_streams(
        monkeypatch: pytest.MonkeyPatch, keep_threads: None) -> None:
    """--peak in-run times GEMMs inside a rank between training steps: the global stream
    that drives the rank's dropout must come out of it where it went in."""
    monkeypatch.setitem(peak.GEMM_SIZES, "cpu", (32, 64))
    monkeypatch.setitem(peak.COPY_BYTES, "cpu", 64 * 1024)
    torch.manual_seed(1234)
    expected = torch.rand(8)
    torch.manual_seed(1234)
    measure_peak("cpu", "fp32", threads=1, reps=2)
    peak.in_run_reading("cpu", "fp32", 1, torch.device("cpu"), "before")
    assert torch.equal(torch.rand(8), expected)


def test_an_in_run_reading_keeps_the_ranks_thread_count(
        monkeypatch: pytest.MonkeyPatch, keep_threads: None) -> None:
    monkeypatch.setitem(peak.GEMM_SIZES, "cpu", (32,))
    monkeypatch.setitem(peak.COPY_BYTES, "cpu", 64 * 1024)
    torch.set_num_threads(1)
    peak.in_run_reading("cpu", "fp32", 2, torch.device("cpu"), "after")
    assert torch.get_num_threads() == 1
