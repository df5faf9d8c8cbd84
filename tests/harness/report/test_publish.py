"""`dtbench publish`: a static site of two machines over several commits, every page and link
in it, the raw records, escaping of hostile strings, and clear errors for a bad -o."""
from __future__ import annotations

import json
import re
from html import unescape
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
from report_records import collective, hostile, training, write_store

from harness.commands.cli import main
from harness.publish.page import SCRIPT, SCRIPT_HASH

COMMITS = [f"{i:x}" * 12 for i in range(1, 9)]  # eight commits, oldest first
DROP_AT = 4  # machine-a's throughput falls by a fifth from the fifth commit on
HOSTILE_RUN_ID = "../../<script>alert(3)</script>"
HOSTILE_MACHINE = "<b>evil</b> & \"quoted\""


def _run(machine: str, commit: int, repeat: int, *, precision: str = "fp32",
         speed: float = 1.0, busy: bool = False) -> dict[str, Any]:
    when = f"2024-03-{commit + 1:02d}T0{repeat}:00:00Z"
    record = training(f"202403{commit:02d}T0{repeat}0000Z-{machine}-{precision}",
                      precision=precision, speed=speed, created=when)
    record["machine"]["name"] = machine
    record["spec_key"] = f"hep_cnn-{precision}"
    record["code"] = {"commit": COMMITS[commit], "branch": "main", "dirty": False,
                      "ci_url": None}
    if busy:
        record["load"] = {"busy": True, "busy_reason": "others took 40% of the run's cores"}
    return record


def machine_records() -> list[dict[str, Any]]:
    """machine-a and machine-b, 8 commits, 2 runs a commit; b is 1.5× faster; a drops 20%
    at DROP_AT; a also ran bf16 at the last commit, on a busy machine."""
    records = []
    for commit in range(len(COMMITS)):
        for repeat in range(2):
            wobble = 1 + 0.004 * ((commit * 7 + repeat * 3) % 5 - 2)
            drop = 0.8 if commit >= DROP_AT else 1.0
            records.append(_run("machine-a", commit, repeat, speed=wobble * drop))
            records.append(_run("machine-b", commit, repeat, speed=1.5 * wobble))
    records.append(_run("machine-a", len(COMMITS) - 1, 3, precision="bf16", speed=2.0,
                        busy=True))
    comm = collective("20240310T000000Z-comm-allreduce")
    comm["machine"]["name"] = "machine-a"
    return [*records, comm]


def _hostile_machine(record: dict[str, Any]) -> dict[str, Any]:
    """The record on a machine whose label is markup: the schema keeps --machine names to
    safe characters, so the CPU model (free text from /proc/cpuinfo) carries it."""
    record["machine"].update(name=None, cpu_vendor=None, cpu_family=None,
                             cpu_model_number=None, cpu_model=HOSTILE_MACHINE)
    return record


def hostile_records() -> list[dict[str, Any]]:
    evil = _hostile_machine(hostile(training("20240311T000000Z-evil")))
    good = _hostile_machine(training("20240311T000001Z-evil-ok",
                                     workload="x</td><td>y $\\frac{"))
    return [evil, good]


def traversal_record() -> dict[str, Any]:
    """A record whose run_id would name a file outside the site: refused by the schema."""
    return {**training("20240311T000002Z-x"), "run_id": HOSTILE_RUN_ID}


class Links(HTMLParser):
    """Every href and src of a page, its script bodies, its tables' ids and rows."""

    def __init__(self) -> None:
        super().__init__()
        self.targets: list[str] = []
        self.scripts: list[str] = []
        self.tables: dict[str, list[list[str]]] = {}
        self._script: list[str] | None = None
        self._table: str | None = None
        self._cell: list[str] | None = None
        self._in_body = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        for name in ("href", "src"):
            if found.get(name) is not None:
                self.targets.append(found[name] or "")
        if tag == "script":
            self._script = []
        elif tag == "table":
            self._table = found.get("id") or f"#{len(self.tables)}"
            self.tables[self._table] = []
        elif tag == "tbody":
            self._in_body = True
        elif tag == "tr" and self._in_body and self._table:
            self.tables[self._table].append([])
        elif tag == "td" and self._in_body:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "script" and self._script is not None:
            self.scripts.append("".join(self._script))
            self._script = None
        elif tag == "td" and self._cell is not None and self._table:
            self.tables[self._table][-1].append("".join(self._cell))
            self._cell = None
        elif tag == "tbody":
            self._in_body = False

    def handle_data(self, data: str) -> None:
        if self._script is not None:
            self._script.append(data)
        if self._cell is not None:
            self._cell.append(data)


def parse(text: str) -> Links:
    parser = Links()
    parser.feed(text)
    parser.close()
    return parser


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("publish")
    store = write_store(root / "store", machine_records())
    extra = root / "hostile.json"
    extra.write_text(json.dumps(hostile_records()))
    (root / "traversal.json").write_text(json.dumps(traversal_record()))
    out = root / "site"
    assert main(["publish", str(store), str(extra), str(root / "traversal.json"),
                 "-o", str(out)]) == 0
    return out


def pages(site: Path) -> list[Path]:
    return sorted(site.rglob("*.html"))


def test_every_page_is_there(site: Path) -> None:
    assert (site / "index.html").is_file()
    assert len(list((site / "machines").glob("*.html"))) == 3  # a, b and the hostile one
    assert (site / "machines" / "machine-a.html").is_file()
    assert (site / "workloads" / "hep_cnn.html").is_file()
    assert len(list((site / "workloads").glob("*.html"))) == 2  # hep_cnn and the hostile one
    index = parse((site / "index.html").read_text())
    assert {t for t in index.targets if t.startswith("machines/")} == {
        f"machines/{p.name}" for p in (site / "machines").glob("*.html")}
    assert {t for t in index.targets if t.startswith("workloads/")} == {
        f"workloads/{p.name}" for p in (site / "workloads").glob("*.html")}


def bundled(site: Path) -> dict[str, tuple[str, str]]:
    """Each published record's run_id: (its bundle page and anchor, its text in the page)."""
    found = {}
    for page in (site / "records").rglob("*.html"):
        for anchor, run_id, text in re.findall(
                r'<h2 id="([^"]+)">(.*?)</h2>\n<pre>(.*?)</pre>', page.read_text(), re.S):
            record = json.loads(unescape(text))
            assert unescape(run_id) == record["run_id"]
            found[record["run_id"]] = (f"{page.relative_to(site).as_posix()}#{anchor}",
                                       unescape(text))
    return found


def test_every_link_and_image_resolves_inside_the_site(site: Path) -> None:
    reached = set()
    for page in pages(site):
        for target in parse(page.read_text()).targets:
            parts = urlsplit(target)
            assert not parts.scheme and not parts.netloc and not target.startswith("/"), target
            path = (page.parent / unquote(parts.path)).resolve()
            assert path.is_file(), f"{page.relative_to(site)}: {target}"
            assert site.resolve() in path.parents
            if parts.fragment and not parts.fragment.startswith("sort="):
                assert f'id="{parts.fragment}"' in path.read_text(), target
            reached.add(path)
    # every record file and every plot is reached from some page
    published = {path.resolve() for folder in ("records", "plots")
                 for path in (site / folder).rglob("*") if path.is_file()}
    assert len(published) > 20 and published <= reached


def test_every_record_is_published_once_and_linked_to_its_anchor(site: Path) -> None:
    expected = {r["run_id"] for r in [*machine_records(), *hostile_records()]}
    found = bundled(site)
    assert set(found) == expected
    published = [json.loads(unescape(text)) for page in (site / "records").rglob("*.html")
                 for text in re.findall(r"<pre>(.*?)</pre>", page.read_text(), re.S)]
    assert sorted(r["run_id"] for r in published) == sorted(expected)  # each once
    linked = set()
    for page in (site / "machines").glob("*.html"):
        for target in parse(page.read_text()).targets:
            if "records/" in target:
                linked.add(unquote(target).removeprefix("../"))
    assert {where for where, _ in found.values()} <= linked  # each from its machine's page
    # a file per machine and commit (or day without one): machine-a's 8 commits and the day of
    # its collective benchmark, b's 8 commits, the hostile machine's day
    assert len(list((site / "records").rglob("*.html"))) == 18


def test_a_stores_records_are_copied_byte_for_byte(site: Path) -> None:
    """publish copies the stored files' text into the pages (it parses only the latest
    records of each machine's experiments)."""
    stored = [p.read_text() for p in (site.parent / "store").glob("*.json")]
    texts = {text for _, text in bundled(site).values()}
    assert stored and all(text in texts for text in stored)


def test_hostile_strings_are_escaped_and_no_other_script_exists(site: Path) -> None:
    for page in pages(site):
        text = page.read_text()
        parsed = parse(text)
        assert parsed.scripts == [SCRIPT], page  # only the hashed sorting script
        assert f"script-src 'sha256-{SCRIPT_HASH}'" in unescape(text)
        assert "<b>evil" not in text and "<img src=x" not in text
        assert "</td><td>y" not in text
        assert "\u202e" not in text and "\x00" not in text
    index = (site / "index.html").read_text()
    assert "&lt;b&gt;evil&lt;/b&gt; &amp; &quot;quoted&quot;" in index
    names = [part for p in (site / "records").rglob("*")
             for part in p.relative_to(site / "records").parts]
    assert names and all(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name) for name in names)
    assert not (site.parent / "<script>alert(3)</script>.json").exists()


def test_machine_page_has_latest_results_trends_and_change_point(site: Path) -> None:
    page = (site / "machines" / "machine-a.html").read_text()
    latest = parse(page).tables["latest"]
    assert [row[2] for row in latest] == ["bf16", "fp32"]  # one row per experiment
    bf16, fp32 = latest
    assert bf16[5] == COMMITS[-1][:12] and fp32[5] == COMMITS[-1][:12]
    assert bf16[-3] == "success (busy)" and fp32[-3] == "success"
    assert "[" in fp32[6]  # throughput with its confidence interval
    plots = sorted(p.name for p in (site / "plots").glob("machine-a--*.png"))
    assert plots == ["machine-a--hep_cnn--peak_memory.png", "machine-a--hep_cnn--throughput.png"]
    assert all((site / "plots" / name).read_bytes().startswith(b"\x89PNG") for name in plots)
    steps = parse(page).tables["steps"]
    throughput_steps = [row for row in steps if row[1] == "throughput"]
    assert [(row[2], row[3]) for row in throughput_steps] == [
        (COMMITS[DROP_AT - 1][:12], COMMITS[DROP_AT][:12])]
    assert throughput_steps[0][4].startswith("-2") and throughput_steps[0][7] == "regression"
    quiet = (site / "machines" / "machine-b.html").read_text()
    assert "steps" not in parse(quiet).tables  # b's steady series: no change point
    assert (site / "plots" / "machine-b--hep_cnn--throughput.png").is_file()


def test_workload_page_compares_the_machines(site: Path) -> None:
    parsed = parse((site / "workloads" / "hep_cnn.html").read_text())
    systems = parsed.tables["t1"]
    assert [row[0] for row in systems] == ["machine-a", "machine-b"]
    throughput = parsed.tables["t2"]
    fp32 = next(row for row in throughput if row[2] == "fp32")
    # the machines' latest results: b steady at 1.5x, a 20% down since DROP_AT: 1.5 / 0.8
    assert "1.88" in fp32[-1] or "1.87" in fp32[-1]


def test_the_index_and_workload_pages_lead_with_the_machines_chart(site: Path) -> None:
    """What a visitor comes for first: every machine's throughput per experiment as bars with
    their interval and ratio to the reference; then the tables, each heading once, memory in
    binary units (it was raw bytes)."""
    index = (site / "index.html").read_text()
    body = index[index.index("<body>"):]
    assert body.index('src="plots/machines.png"') < body.index("<table")
    assert "ratio to" in body and (site / "plots" / "machines.png").read_bytes().startswith(
        b"\x89PNG")
    page = (site / "workloads" / "hep_cnn.html").read_text()
    assert page.index('src="../plots/workload--hep_cnn.png"') < page.index("<table")
    assert page.count(">Systems<") == 1
    assert "<h3>peak memory (MiB)</h3>" in page and "<h3>MFU (%)</h3>" in page
    # the reference is the identified machine with the most records, first in every table
    assert "the reference (machine-a) its ratio" in page


def test_publishing_again_replaces_the_site_with_the_same_pages(site: Path,
                                                                tmp_path: Path) -> None:
    store = write_store(tmp_path / "store", machine_records()[:6])
    first = {p.relative_to(site): p.read_text() for p in pages(site)}
    assert first
    out = tmp_path / "again"
    assert main(["publish", str(store), "-o", str(out)]) == 0
    stale = out / "records" / "stale.json"
    stale.write_text("{}")
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert main(["publish", str(store), "-o", str(out)]) == 0
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert not stale.exists()
    before.pop(stale.relative_to(out))
    assert after == before  # the same bytes for the same records, PNGs included


def test_pages_written_by_forked_workers_match_pages_written_in_turn(
        site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The machine and workload pages are written by a worker a core where the platform
    forks; one core writes them in turn. Both give the same files, byte for byte."""
    parallel = {p.relative_to(site): p.read_bytes() for p in site.rglob("*") if p.is_file()}
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0}, raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 1)
    store = site.parent / "store"
    extra = site.parent / "hostile.json"
    out = tmp_path / "serial"
    assert main(["publish", str(store), str(extra), str(site.parent / "traversal.json"),
                 "-o", str(out)]) == 0
    serial = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    index = Path("index.html")  # names the output directory in its regenerate command
    assert serial.pop(index).replace(str(out).encode(), b"OUT") == \
        parallel.pop(index).replace(str(site).encode(), b"OUT")
    assert len(parallel) > 20 and serial == parallel


def test_bad_output_and_empty_input_are_clear_errors(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    store = write_store(tmp_path / "store", machine_records()[:2])
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "mine.txt").write_text("keep")
    assert main(["publish", str(store), "-o", str(foreign)]) == 2
    assert "not a site dtbench publish wrote" in capsys.readouterr().err
    assert (foreign / "mine.txt").read_text() == "keep"
    assert main(["publish", str(store), "-o", str(tmp_path / "no" / "such")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["publish", str(tmp_path / "empty"), "-o", str(tmp_path / "out")]) == 2
    assert "no records" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
