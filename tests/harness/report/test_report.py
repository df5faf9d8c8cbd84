"""`dtbench report`: Markdown, CSV and HTML content, determinism, escaping, bad inputs."""
from __future__ import annotations

import base64
import csv
import io
import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest
from report_records import (
    FLOPS_PER_SAMPLE,
    SIZES,
    collective,
    failed,
    hostile,
    standard_set,
    time_to_train,
    training,
    write_store,
)

from harness.commands.cli import main
from harness.core.text import size_label
from harness.report.markdown import md_escape
from harness.report.units import choose_scale, format_number
from harness.report.view import clean_text

FP32 = "20240102T030405Z-hep_cnn-fp32"


def report(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run `dtbench report ARGS` in-process: exit code, stdout, stderr."""
    code = main(["report", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return write_store(tmp_path / "results", standard_set())


def cells_of(line: str) -> list[str]:
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]


def table_rows(markdown: str, *first: str) -> list[dict[str, str]]:
    """The rows, by heading, of the first table whose header begins with `first`."""
    lines = markdown.splitlines()
    for at, line in enumerate(lines[:-1]):
        header = cells_of(line) if line.startswith("|") else []
        if header and header[:len(first)] == list(first) and lines[at + 1].startswith("|") \
                and set(lines[at + 1]) <= set("|-: "):
            rows = []
            for below in lines[at + 2:]:
                if not below.startswith("|"):
                    break
                rows.append(dict(zip(header, cells_of(below), strict=True)))
            return rows
    raise AssertionError(f"no table whose header starts {' | '.join(first)}")


def row_where(markdown: str, first: tuple[str, ...], **match: str) -> dict[str, str]:
    """The one row of that table whose cells hold `match` (a heading's spaces as _)."""
    found = [row for row in table_rows(markdown, *first)
             if all(row.get(key.replace("_", " ")) == value for key, value in match.items())]
    assert len(found) == 1, (match, found)
    return found[0]


def training_section(markdown: str) -> str:
    """The Training section of a report."""
    return markdown.split("## Training\n", 1)[1].split("\n## ", 1)[0]


# --- Markdown ---------------------------------------------------------------------------------

def test_markdown_tables_show_metrics_in_reading_units_with_ci(
        store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = report(capsys, str(store))
    assert code == 0
    assert out.startswith("# dtbench report\n")
    assert "7 records (1 failed, 6 success) of 1 machine" in out
    table = training_section(out)
    first = ("comm", "launcher", "precision")  # one machine: no machine column
    row = row_where(table, first, precision="fp32", mode="throughput", ranks="1")
    # 16 samples per 10 ms step; 8 samples -> the CI of the median is the full range.
    assert row["throughput (samples/s)"] == r"1600 \[1553, 1649\]"
    assert row["step time (ms)"] == r"10.00 \[9.700, 10.30\]"
    assert row["achieved (GFLOP/s)"].startswith(format_number(FLOPS_PER_SAMPLE * 1600 / 1e9))
    assert row["MFU (%)"].startswith("18.00 ")
    assert row["peak memory (MiB)"] == "512.0" and row["status"] == "success"
    # the golden Ice Lake has no bf16 instructions: its bf16 is marked
    bf16 = row_where(table, first, precision="bf16 (emulated)")
    assert bf16["throughput (samples/s)"].startswith("3200 ")
    scaled = row_where(table, first, ranks="2")
    assert scaled["scaling efficiency (%)"] == "80.00 (weak)" and scaled["comm"] == "gloo"
    ttt = row_where(table, first, mode="ttt")
    assert ttt["time to train (s)"] == "95.50"
    assert ttt["quality"] == "accuracy 0.9125 (target 0.9, reached)"
    assert "Every row: backend cpu, nnodes 1, size tiny" in table


def test_markdown_header_names_machines_software_and_how_to_regenerate(
        store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = report(capsys, str(store))
    # The machine's label from the fingerprint: the microarchitecture and cores.
    machines = row_where(out, ("machine", "host"), machine="Intel Ice Lake, 80 cores")
    assert machines["CPU"].startswith("Intel(R) Xeon(R) Platinum 8380")
    assert machines["RAM"] == "256.00 GiB" and machines["records"] == "7"
    assert "| 3.11.7 | 2.13.0+cpu | 3.12.0 |" in out
    assert f"Regenerate with: dtbench report {md_escape(str(store))}\n" in out


def test_markdown_collectives_have_busbw_per_message_size(
        store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = report(capsys, str(store))
    assert "## Collectives" in out and "### allreduce\n" in out and "### allgather\n" in out
    allreduce = out.split("### allreduce\n")[1].split("###")[0]
    (row,) = table_rows(allreduce, "comm")
    assert list(row) == ["comm", "ranks", "status", "1 KiB", "2 KiB", "4 KiB", "8 KiB",
                         "16 KiB", "32 KiB", "latency (µs)"]
    # busbw = bytes / time * 2(n-1)/n with n = 2: 1024 B in 0.1 ms, 32 KiB in 0.6 ms.
    assert row["1 KiB"] == "0.01024"
    assert row["32 KiB"] == format_number(32768 / 6e-4 / 1e9) == "0.05461"
    assert row["latency (µs)"] == "100.0"
    assert row["comm"] == "gloo" and row["ranks"] == "2"


def test_failed_records_show_status_and_error(
        store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = report(capsys, str(store))
    row = row_where(training_section(out), ("comm",), status="failed")
    assert row["precision"] == "fp16 (emulated)" and list(row.values()).count("-") >= 5
    assert "- Intel Ice Lake, 80 cores: cpu/fp16 ×1: failed: rank 1 exited with code 9" in out


def test_a_figure_that_missed_its_precision_target_is_marked(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    precise, missed = training("run-precise"), training("run-missed", precision="bf16")
    precise["notes"]["measurement"] = {"rule": "adaptive", "target_met": True,
                                       "achieved_ci_pct": 1.2, "target_ci_pct": 2.0}
    missed["notes"]["measurement"] = {"rule": "adaptive", "target_met": False,
                                      "achieved_ci_pct": 7.5, "target_ci_pct": 2.0,
                                      "stopped": "time budget spent", "measured_steps": 41,
                                      "drifting": True}
    store = write_store(tmp_path / "store", [precise, missed])
    _, out, _ = report(capsys, str(store))
    table = training_section(out)
    assert row_where(table, ("precision",), precision="bf16 (emulated)")["status"] == \
        "success (imprecise)"
    assert row_where(table, ("precision",), precision="fp32")["status"] == "success"
    assert ("Intel Ice Lake, 80 cores: cpu/bf16 ×1: imprecise: +/-7.5% against +/-2% (time "
            "budget spent after 41 steps; drifting)") in out.replace("\\", "").replace("\n  ", " ")


def test_repeats_of_one_configuration_state_their_spread_beside_one_runs_interval(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = [training(f"run-{i}", speed=speed) for i, speed in enumerate((1.0, 1.1, 0.9))]
    for run in runs:
        run["metrics"][1]["interval_pct"] = {"achieved": 1.5, "target": 2.0, "met": True}
    other = training("run-bf16", precision="bf16")  # measured once: no spread to state
    # the same spec at an older commit: history, not a repeat
    earlier = training("run-earlier", speed=2.0, created="2024-01-01T03:04:05Z")
    earlier["code"] = {"commit": "f" * 40, "branch": "main", "dirty": False}
    _, out, _ = report(capsys, str(write_store(tmp_path / "store", [*runs, other, earlier])))
    notes = [line for line in out.replace("\\", "").replace("\n  ", " ").splitlines()
             if "between runs" in line]
    # (1.1 - 0.9) / 2 / 1.0: +/-10%, beside the 1.5% each run states: unstable
    assert notes == ["- between runs: tiny cpu/fp32 ×1 on Intel Ice Lake, 80 cores, one commit: "
                     "throughput +/-10.0% across 3 runs, +/-1.5% within a run (unstable: the "
                     "runs disagree more than one run shows)"]


def test_markdown_ends_with_the_records_and_files_it_was_made_from(
        store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = report(capsys, str(store), "--runs")
    records = out[out.index("## Records"):]
    for record in standard_set():
        assert md_escape(record["run_id"]) in records
    # a store is read through its index: the store is named, not each file
    assert records.endswith(f"Files read:\n\n- {md_escape(str(store))}\n")


def test_no_records_is_bad_input_like_compare(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "x.json").write_text("{not json")
    code, out, err = report(capsys, str(tmp_path / "empty"))
    assert code == 2 and out == ""
    assert err.startswith("dtbench report: error: no records in") and "\n" not in err.strip()
    code, out, err = report(capsys, str(tmp_path / "junk"), "-o", str(tmp_path / "r.md"))
    assert code == 2 and "1 file(s) skipped" in err
    assert not (tmp_path / "r.md").exists()


def test_missing_input_is_a_usage_error(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = report(capsys, str(tmp_path / "nowhere"))
    assert code == 2 and out == ""
    assert err.startswith("dtbench report: error:") and err.count("\n") == 1


# --- CSV --------------------------------------------------------------------------------------

def test_csv_has_one_row_per_record_and_metric(store: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = report(capsys, str(store), "--format", "csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert set(rows[0]) >= {"run_id", "workload", "backend", "precision", "world_size",
                            "status", "metric", "unit", "value", "median", "ci_low", "ci_high",
                            "n"}
    throughput = [r for r in rows if r["run_id"] == FP32 and r["metric"] == "throughput"]
    assert len(throughput) == 1
    row = throughput[0]
    assert float(row["value"]) == pytest.approx(1600)
    assert float(row["ci_low"]) == pytest.approx(16 / 0.0103)
    assert float(row["ci_high"]) == pytest.approx(16 / 0.0097)
    assert row["n"] == "8" and row["unit"] == "samples/s" and row["precision"] == "fp32"
    keys = [(r["run_id"], r["metric"], r["bytes"]) for r in rows]
    assert len(keys) == len(set(keys))
    fp32_metrics = [r["metric"] for r in rows if r["run_id"] == FP32]
    assert fp32_metrics == ["step_time", "throughput", "flops_per_sample", "achieved_flops",
                            "peak_flops", "mfu", "peak_memory"]
    busbw = {int(r["bytes"]): float(r["value"]) for r in rows
             if r["run_id"] == "20240102T030700Z-comm-allreduce" and r["metric"] == "busbw"}
    assert sorted(busbw) == SIZES
    assert busbw[1024] == pytest.approx(1024 / 1e-4 / 1e9)
    failures = [r for r in rows if r["status"] == "failed"]
    assert len(failures) == 1 and failures[0]["metric"] == ""
    assert failures[0]["error"] == "rank 1 exited with code 9"


def test_csv_quotes_hostile_text_and_defuses_formulas(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    record = hostile(training("20240102T040000Z-evil"))
    record["spec"]["suite"] = "=HYPERLINK(\"http://x\")"
    _, out, _ = report(capsys, str(write_store(tmp_path / "s", [record])), "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert rows[0]["error"] == "bad | cell second line <img src=x onerror=alert(2)> \\"
    assert rows[0]["suite"].startswith("'=")
    assert len({len(r) for r in rows}) == 1


# --- HTML -------------------------------------------------------------------------------------

class Cells(HTMLParser):
    """Counts cells per table row and collects images, scripts and external references."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[int] = []
        self.images: list[dict[str, str | None]] = []
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag == "tr":
            self.rows.append(0)
        elif tag in ("td", "th"):
            self.rows[-1] += 1
        elif tag == "img":
            self.images.append(dict(attrs))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(page: str) -> Cells:
    parser = Cells()
    parser.feed(page)
    return parser


def test_html_is_self_contained_with_tables_and_plots(
        store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report.html"
    code, stdout, _ = report(capsys, str(store), "-o", str(out))
    assert code == 0 and stdout == ""
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    assert ('<meta http-equiv="Content-Security-Policy" content="default-src &#x27;none&#x27;; '
            "img-src data:; style-src &#x27;unsafe-inline&#x27;\">") in page
    parsed = parse(page)
    assert "script" not in parsed.tags and "link" not in parsed.tags
    assert not re.search(r"(src|href)=\"(?!data:)", page)
    assert len(parsed.images) == 5
    for image in parsed.images:
        assert image["alt"]
        assert (image["src"] or "").startswith("data:image/png;base64,")
        png = base64.b64decode((image["src"] or "").split(",", 1)[1])
        assert png.startswith(b"\x89PNG\r\n\x1a\n") and b"Software" not in png
    assert page.count("<figcaption>") == 5
    assert "1600 [1553, 1649]" in page
    assert "busbw against message size" in page


def test_html_leaves_out_plots_without_data_with_a_note(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = write_store(tmp_path / "s", [training(FP32)])
    _, page, _ = report(capsys, str(store), "--format", "html")
    assert len(parse(page).images) == 2  # throughput and achieved-vs-peak
    for omitted in ("scaling plot is omitted", "time-to-train plot is omitted",
                    "busbw plot is omitted"):
        assert omitted in page


# --- Escaping ---------------------------------------------------------------------------------

@pytest.fixture
def hostile_store(tmp_path: Path) -> Path:
    return write_store(tmp_path / "hostile", [training(FP32),
                                              hostile(training("20240102T040000Z-evil"))])


def test_hostile_strings_are_escaped_in_markdown(
        hostile_store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = report(capsys, str(hostile_store))
    assert code == 0
    for raw in ("<script>", "</td>", "<img", "\x00", "\u202e", "[link](", "*bold*", "`code`"):
        assert raw not in out
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in out
    assert r"bad \| cell second line &lt;img src=x onerror=alert(2)&gt; \\" in out
    lines = out.splitlines()
    assert not any(line.startswith("second line") for line in lines)
    # Every table line has as many cell separators as its header line.
    for start, line in enumerate(lines):
        if line.startswith("| ") and (start == 0 or not lines[start - 1].startswith("|")):
            width = len(re.findall(r"(?<!\\)\|", line))
            end = start
            while end < len(lines) and lines[end].startswith("|"):
                assert len(re.findall(r"(?<!\\)\|", lines[end])) == width, lines[end]
                end += 1


def test_hostile_strings_are_escaped_in_html(
        hostile_store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, page, _ = report(capsys, str(hostile_store), "--format", "html")
    assert code == 0
    for raw in ("<script", "</td><td>y", "<img src=x", "\x00", "\u202e"):
        assert raw not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "x&lt;/td&gt;&lt;td&gt;y" in page
    parsed = parse(page)
    assert "script" not in parsed.tags
    assert len(parsed.images) == 2  # the `$` in the workload name did not break the plots
    text = "".join(parsed.text)
    assert "<script>alert(1)</script>" in text  # shown literally, as text
    assert "bad | cell second line" in text
    # Tables keep their shape: each row has as many cells as its header.
    tables = page.split("<table>")[1:]
    for table in tables:
        counts = parse("<table>" + table.split("</table>")[0]).rows
        assert len(set(counts)) == 1, counts


def test_escaping_helpers() -> None:
    assert md_escape("a|b`c*d_e[f]g<h>i&j\\") == r"a\|b\`c\*d\_e\[f\]g&lt;h&gt;i&amp;j\\"
    assert md_escape("one\ntwo\r\nthree") == "one two three"
    # an escape sequence goes whole, not just its ESC
    assert clean_text("a\x00b\x1b[31mc\u202ed\ud800") == "a bc d\ufffd"
    assert clean_text("x" * 600).endswith("…") and len(clean_text("x" * 600)) == 500


def test_clean_text_keeps_every_printable_character_and_no_unsafe_one() -> None:
    """Printable text takes a fast path: it must agree with the character-by-character rule
    for every code point (one at a time, between letters)."""
    import sys
    import unicodedata

    for point in range(0, sys.maxunicode + 1, 7):
        char = chr(point)
        category = unicodedata.category(char)
        expected = "a b" if category in {"Cc", "Cf", "Zl", "Zp"} or char.isspace() else \
            "a\ufffdb" if category == "Cs" else f"a{char}b"
        assert clean_text(f"a{char}b") == expected, hex(point)


def test_units_chosen_for_reading() -> None:
    assert choose_scale("achieved_flops", "FLOP/s", [7.2e10]).label == "GFLOP/s"
    assert choose_scale("achieved_flops", "FLOP/s", [3e12]).label == "TFLOP/s"
    assert choose_scale("peak_memory", "bytes", [3 * 2**30]).label == "GiB"
    assert choose_scale("peak_memory", "bytes", [512 * 2**20]).label == "MiB"
    assert choose_scale("step_time", "s", [1.5]).label == "ms"
    assert choose_scale("time_to_train", "s", [95.0]).label == "s"
    assert choose_scale("latency", "s", [2e-5]).label == "µs"
    assert choose_scale("mfu", "1", [0.5]).label == "%"
    assert [format_number(v) for v in (1234.4, 123.44, 12.344, 1.2344, 0.012344, 0)] == \
        ["1234", "123.4", "12.34", "1.234", "0.01234", "0"]
    assert size_label(64 * 2**20) == "64 MiB" and size_label(1000) == "1000 B"


# --- Damaged inputs, output, formats ----------------------------------------------------------

def test_damaged_file_is_skipped_with_a_warning_naming_it(
        store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (store / "20240102T999999Z-broken.json").write_text('{"schema_version": 1, "run')
    # Valid for the schema, but with the odd values a record may still hold (open objects,
    # counts at the schema's bound, nulls): a report never crashes on them.
    weird = collective("weird")
    weird["spec"].update(op=None, world_size=2**24, nnodes=0)
    weird["metrics"][0]["per_size"] = "garbage"
    weird["machine"].update(gpus=None, interconnect=None, cpu_cores=None, extra=[1])
    weird["software"]["mpi"] = "x"
    odd = training("odd-types")
    odd["spec"].update(world_size=None, precision=None)
    odd["metrics"].append({"name": "quality", "value": 0.5, "reached": None, "target": None,
                           "history": [{"seconds": "x"}, {}]})
    odd["metrics"].append({"name": "scaling_efficiency", "value": 0.5, "kind": ["weak"]})
    odd["metrics"].append({"name": "energy", "value": None, "unit": "J"})
    # Types the schema pins are wrong: skipped with a warning, like a damaged file.
    mistyped = training("mistyped")
    mistyped["spec"]["world_size"] = "two"
    write_store(store, [weird, odd, mistyped])
    for fmt in ("md", "html", "csv"):
        code, out, err = report(capsys, str(store), "--format", fmt, "--runs")
        assert code == 0
        warnings = [line for line in err.splitlines() if line.startswith("dtbench: warning:")]
        assert len(warnings) == 2 and "20240102T999999Z-broken.json" in warnings[0]
        assert "mistyped.json: spec.world_size: 'two' is not of type" in warnings[1]
        assert "Traceback" not in err
        assert "weird" in out and "odd-types" in out
    code, out, _ = report(capsys, str(store))
    assert "## Skipped inputs" in out and "20240102T999999Z" in out[out.index("## Skipped"):]


def test_output_into_a_missing_directory_is_a_usage_error(
        store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "missing" / "report.md"
    code, out, err = report(capsys, str(store), "-o", str(target))
    assert code == 2 and out == ""
    assert err.startswith("dtbench report: error: -o") and err.count("\n") == 1
    assert not target.parent.exists()


@pytest.mark.parametrize(("name", "extra", "start"), [
    ("r.md", [], "# dtbench report"), ("r.html", [], "<!DOCTYPE html>"),
    ("r.htm", [], "<!DOCTYPE html>"), ("r.csv", [], "run_id,"),
    ("r.csv", ["--format", "csv"], "run_id,")])
def test_format_from_the_output_suffix(store: Path, tmp_path: Path, name: str,
                                       extra: list[str], start: str,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    code, _, _ = report(capsys, str(store), *extra, "-o", str(tmp_path / name))
    assert code == 0
    assert (tmp_path / name).read_text(encoding="utf-8").startswith(start)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp-")] == []


# --- Determinism ------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["md", "html", "csv"])
def test_same_records_give_identical_bytes(store: Path, fmt: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    _, first, _ = report(capsys, str(store), "--format", fmt)
    _, second, _ = report(capsys, str(store), "--format", fmt)
    assert first == second


def test_report_regenerates_byte_for_byte_in_another_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    first = tmp_path / "first"
    write_store(first / "results", list(reversed(standard_set())))
    monkeypatch.chdir(first)
    for name in ("README.md", "report.html", "report.csv"):
        assert report(capsys, "results/", "-o", f"results/{name}")[0] == 0
    made = {name: (first / "results" / name).read_bytes()
            for name in ("README.md", "report.html", "report.csv")}
    assert b"Regenerate with: dtbench report results/ -o results/README.md\n" in made["README.md"]
    assert str(tmp_path).encode() not in made["README.md"] + made["report.html"]

    second = tmp_path / "elsewhere" / "copy"
    shutil.copytree(first, second)
    monkeypatch.chdir(second)
    for name in made:
        assert report(capsys, "results/", "-o", f"results/{name}")[0] == 0
        assert (second / "results" / name).read_bytes() == made[name], name
    monkeypatch.chdir(first)
    assert report(capsys, "results/", "-o", "results/README.md")[0] == 0
    assert (first / "results" / "README.md").read_bytes() == made["README.md"]


def test_order_of_inputs_does_not_change_the_tables(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    records = standard_set() + [collective("20240102T030702Z-comm-nccl", comm="nccl",
                                           world_size=8), failed("20240102T030900Z-other")]
    store = write_store(tmp_path / "store", records)
    listed = tmp_path / "listed.json"
    listed.write_text(json.dumps(list(reversed(records))))
    _, first, _ = report(capsys, str(store))
    _, second, _ = report(capsys, str(listed))
    assert first.replace(md_escape(str(store)), "X").split("Files read:")[0] == \
        second.replace(md_escape(str(listed)), "X").split("Files read:")[0]


def test_convergence_plot_draws_quality_against_time_per_strategy(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    found = []
    for index, strategy in enumerate(("ddp", "ps-async")):
        record = time_to_train(f"2024010{index + 2}T030000Z-ttt")
        record["spec"]["strategy"] = strategy
        quality = next(m for m in record["metrics"] if m["name"] == "quality")
        quality["history"] = [{"epoch": 1, "step": 5, "seconds": 10.0 + index, "accuracy": 0.5},
                              {"epoch": 2, "step": 10, "seconds": 20.0 + index,
                               "accuracy": 0.92}]
        found.append(record)
    _, page, _ = report(capsys, str(write_store(tmp_path / "s", found)), "--format", "html")
    assert "Convergence against wall-clock time" in page
    assert "convergence plot is omitted" not in page


def test_every_row_and_legend_names_its_machine(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Records of two machines in one report: each training and collective row names its
    own machine's label in its first column (the plots colour by machine instead)."""
    from harness.report.plots import several_machines
    from harness.report.view import views_of

    records = standard_set()
    for record in records[::2]:
        record["machine"] = {**record["machine"], "name": "box-b"}
    store = write_store(tmp_path / "results", records)
    _, out, _ = report(capsys, str(store), "--by", "record")
    table, ice = training_section(out), "Intel Ice Lake, 80 cores"
    for match, machine in (({"precision": "fp32", "mode": "throughput", "ranks": "1"}, "box-b"),
                           ({"ranks": "2"}, "box-b"), ({"precision": "bf16 (emulated)"}, ice),
                           ({"mode": "ttt"}, ice)):
        assert row_where(table, ("machine",), **match)["machine"] == machine, match
    for op, machine in (("allreduce", "box-b"), ("allgather", ice)):
        (row,) = table_rows(out.split(f"### {op}\n")[1], "machine")
        assert row["machine"] == machine, op
    views = views_of(records)
    box_b = [view for view in views if view.machine_label == "box-b"]
    assert several_machines(views) and box_b and not several_machines(box_b)
    assert box_b[0].label(machine=True) == f"box-b: {box_b[0].label()}"


def test_real_data_and_synthetic_runs_sit_side_by_side(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    from harness.records.record import Metric

    synthetic = training("20240102T030405Z-hep_cnn-synthetic", speed=2.0)
    files = training("20240102T030406Z-hep_cnn-files", extra=[
        Metric("data_wait", "s", 0.004, False, samples=[0.004] * 4),
        Metric("data_wait_share", "fraction", 0.4, False, extra={"input_bound": True})])
    files["spec"].update(data="/data/hep.h5", loader_workers=2)
    code, out, _ = report(capsys, str(write_store(tmp_path / "store", [synthetic, files])))
    assert code == 0
    real = row_where(training_section(out), (), data="/data/hep.h5")
    fake = row_where(training_section(out), (), data="synthetic")
    assert real["loader workers"] == "2"
    assert fake["data wait share (fraction)"] == "-"
    assert real["data wait share (fraction)"].startswith("0.4")
    assert fake["throughput (samples/s)"].startswith("3200 ")


def test_the_html_report_draws_the_loader_curve_only_for_file_runs(tmp_path: Path) -> None:
    from harness.report.dataplots import loader_plot
    from harness.report.view import views_of

    synthetic = training("20240102T030405Z-hep_cnn-synthetic", speed=2.0)
    fed = []
    for workers in (0, 1, 2):
        record = training(f"20240102T03040{6 + workers}Z-hep_cnn-w{workers}", speed=1.0)
        record["spec"].update(data="/data/hep.h5", loader_workers=workers)
        fed.append(record)
    views = views_of([synthetic, *fed])
    drawn = loader_plot(views)
    assert drawn.png is not None and drawn.png.startswith(b"\x89PNG")
    assert "loader worker" in drawn.alt and "synthetic" in drawn.caption
    assert loader_plot(views_of([synthetic])).png is None
    assert main(["report", str(write_store(tmp_path / "s", [synthetic, *fed])), "-o",
                 str(tmp_path / "r.html")]) == 0
    assert "against loader worker processes" in (tmp_path / "r.html").read_text()
