"""The published site in headless Chromium: its pages run their one script with no console
error (a script the Content-Security-Policy refused would log one), and a header click sorts
its table. The click is made by the page's own script, from the #sort=TABLE.COLUMN.ORDER
fragment it honours for links to a sorted table, through the same handler a mouse click runs.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from test_publish import parse, site  # noqa: F401 (site: the same published site)
from test_report_browser import chromium, console_errors, run_chromium  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow


def dom(executable: str, page: Path, profile: Path, fragment: str = "") -> str:
    result = run_chromium(executable, page, profile, "--dump-dom", fragment=fragment)
    assert result.returncode == 0, result.stderr[-2000:]
    assert console_errors(result.stderr) == [], result.stderr[-2000:]
    return result.stdout


def test_pages_open_with_no_console_error_and_their_script_running(
        chromium: str, site: Path, tmp_path: Path) -> None:  # noqa: F811 (the fixture)
    hostile = next(p for p in (site / "machines").glob("*.html") if "machine-" not in p.name)
    for number, page in enumerate([site / "index.html", site / "machines" / "machine-a.html",
                                   site / "workloads" / "hep_cnn.html", hostile]):
        text = dom(chromium, page, tmp_path / f"profile-{number}")
        # The script turned every header of a sortable table into a button.
        assert text.count('<th scope="col"><button type="button">') >= 5, page
        assert "<b>evil" not in text
    # a page of records as stored: the hostile machine's, whose records carry markup
    page = next((site / "records" / hostile.stem).glob("*.html"))
    text = dom(chromium, page, tmp_path / "profile-records")
    assert "<pre>{" in text and "<b>evil" not in text and "<script>alert" not in text


def test_a_header_click_sorts_its_table(
        chromium: str, site: Path, tmp_path: Path) -> None:  # noqa: F811 (the fixture)
    page = site / "machines" / "machine-a.html"
    before = parse(page.read_text()).tables
    assert [row[2] for row in before["latest"]] == ["bf16", "fp32"]
    # Throughput (column 6) ascending: fp32 before the twice as fast bf16.
    after = dom(chromium, page, tmp_path / "profile-asc", "sort=latest.6.asc")
    assert [row[2] for row in parse(after).tables["latest"]] == ["fp32", "bf16"]
    assert 'aria-sort="ascending"' in after
    # Run ids (column 0) descending: two clicks on the same header.
    after = dom(chromium, page, tmp_path / "profile-desc", "sort=records.0.desc")
    ids = [row[0] for row in parse(after).tables["records"]]
    assert len(ids) == len(before["records"]) > 10
    assert ids == sorted(ids, reverse=True) != [row[0] for row in before["records"]]
    assert 'aria-sort="descending"' in after
