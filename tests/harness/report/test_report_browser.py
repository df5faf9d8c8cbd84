"""The HTML report in headless Chromium: no console errors, and the plots are really drawn.

Chromium is Debian's `chromium` package. On a CI machine running as root with apt-get it is
installed once per session; elsewhere, without it, the tests skip and say why.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from infrastructure import failed_to_start
from matplotlib.image import imread
from report_records import hostile, standard_set, training, write_store

from harness.commands.cli import main

pytestmark = pytest.mark.slow

CHROMIUM_NAMES = ("chromium", "chromium-browser")
INSTALL_TIMEOUT_S = 600
RUN_TIMEOUT_S = 120
WINDOW = (1400, 6000)
# What Chromium writes to stderr for a page's console messages, uncaught exceptions and
# Content-Security-Policy violations.
CONSOLE_MARKERS = ("CONSOLE", "Uncaught", "Refused to")
FIRST_COLOUR = (0x1F, 0x77, 0xB4)  # matplotlib's C0: the first machine by name
SECOND_COLOUR = (0xFF, 0x7F, 0x0E)  # C1: the second
PLOTS = 5


def _find_chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="session")
def chromium() -> str:
    """The chromium executable, installed with apt-get when missing and allowed."""
    found = _find_chromium()
    if found:
        return found
    is_root = getattr(os, "geteuid", lambda: -1)() == 0
    if not is_root or shutil.which("apt-get") is None:
        pytest.skip("chromium is not installed, and installing it needs root and apt-get "
                    "(apt-get install chromium)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for command in (["apt-get", "update"],
                    ["apt-get", "install", "-y", "--no-install-recommends", "chromium"]):
        try:
            result = subprocess.run(command, env=env, capture_output=True, text=True,
                                    timeout=INSTALL_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            failed_to_start(f"{' '.join(command)} took more than {INSTALL_TIMEOUT_S} s")
        if result.returncode != 0:
            tail = " ".join(result.stderr.split()[-30:])
            failed_to_start(f"{' '.join(command)} exited {result.returncode}: {tail}")
    found = _find_chromium()
    if not found:
        failed_to_start("apt-get installed chromium but no chromium executable is on PATH")
    return found


def run_chromium(chromium: str, page: Path, profile: Path, *action: str, fragment: str = ""
                 ) -> subprocess.CompletedProcess[str]:
    """Open `page` (with `fragment` after a #, if any) headless with logging on stderr;
    `action` is --screenshot=... or --dump-dom."""
    command = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               f"--window-size={WINDOW[0]},{WINDOW[1]}", "--enable-logging=stderr", "--v=0",
               f"--user-data-dir={profile}", "--no-first-run", "--no-default-browser-check",
               *action, page.resolve().as_uri() + (f"#{fragment}" if fragment else "")]
    return subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                          check=False)


def console_errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines()
            if any(marker in line for marker in CONSOLE_MARKERS)]


def pixels_of(image: np.ndarray, colour: tuple[int, int, int], tolerance: int = 6) -> int:
    """How many pixels are `colour`, give or take `tolerance` per channel (0-255)."""
    rgb = image[..., :3]
    if rgb.dtype != np.uint8:
        rgb = np.round(rgb * 255)
    distance = np.abs(rgb.astype(np.int32) - np.array(colour, dtype=np.int32))
    return int(np.all(distance <= tolerance, axis=-1).sum())


@pytest.fixture(scope="module")
def report_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("browser")
    # The hostile record's <script> would be blocked by the page's CSP and logged as a
    # console error if it ever escaped the escaping.
    records = standard_set()
    for record in records[1::2]:  # two machines: each draws in its own colour
        record["machine"] = {**record["machine"], "name": "box-b"}
    store = write_store(folder / "results",
                        [*records, hostile(training("20240102T040000Z-evil"))])
    page = folder / "report.html"
    assert main(["report", str(store), "-o", str(page)]) == 0
    return page


def test_report_renders_without_console_errors_with_its_plots(
        chromium: str, report_page: Path, tmp_path: Path) -> None:
    shot = tmp_path / "report.png"
    result = run_chromium(chromium, report_page, tmp_path / "profile-shot",
                          f"--screenshot={shot}")
    assert result.returncode == 0, result.stderr[-2000:]
    assert console_errors(result.stderr) == []
    image = imread(shot)
    assert image.shape[:2] == (WINDOW[1], WINDOW[0])
    # Five figures, each machine's bars, points and lines in its colour.
    assert pixels_of(image, FIRST_COLOUR) > 5_000
    assert pixels_of(image, SECOND_COLOUR) > 5_000

    dom = run_chromium(chromium, report_page, tmp_path / "profile-dom", "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert console_errors(dom.stderr) == []
    assert dom.stdout.count("<img") == PLOTS
    assert dom.stdout.count('src="data:image/png;base64,') == PLOTS
    assert "<script" not in dom.stdout
    assert dom.stdout.count("<table") >= 4
    # the run ids are there, in their appendix, collapsed
    assert dom.stdout.count("<details>") == 1 and "<details open" not in dom.stdout
    appendix = dom.stdout.split("<details>")[1].split("</details>")[0]
    assert all(record["run_id"] in appendix for record in standard_set())


BROKEN_PAGES = {
    "uncaught exception": "<script>throw new Error('boom')</script>",
    "CSP violation": (
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        'img-src data:"><img alt="x" src="https://example.invalid/x.png">'),
}


@pytest.mark.parametrize("kind", sorted(BROKEN_PAGES))
def test_console_error_detector_flags_a_broken_page(chromium: str, tmp_path: Path,
                                                    kind: str) -> None:
    page = tmp_path / "broken.html"
    page.write_text(f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"></head><body>"
                    f"<p>broken</p>{BROKEN_PAGES[kind]}</body></html>", encoding="utf-8")
    result = run_chromium(chromium, page, tmp_path / "profile", "--dump-dom")
    assert result.returncode == 0, result.stderr[-2000:]
    assert console_errors(result.stderr), result.stderr[-2000:]
