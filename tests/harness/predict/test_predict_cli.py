"""`dtbench predict` end to end in-process: tables, reproducible records, the report's
predictions section, validation, calibration, and one-line errors (exit 2)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.commands.cli import main


@pytest.fixture
def store(tmp_path: Path, run_record, comm_record) -> Path:
    folder = tmp_path / "store"
    folder.mkdir()
    records = [run_record([0.30, 0.32, 0.34], threads=1, batch=32, run_id="single"),
               run_record([0.36] * 3, world_size=2, comm="gloo", run_id="ddp2"),
               comm_record("allreduce", 4e-4, 1e-9), comm_record("broadcast", 1e-4, 1e-9)]
    for record in records:
        (folder / f"{record['run_id']}.json").write_text(json.dumps(record))
    return folder


def test_predictions_are_reproducible_and_reported(store: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    args = ["predict", "hep_cnn", "--calibrate-from", str(store), "--strategy", "ddp",
            "--strategy", "hybrid", "--strategy-opt", "G=2", "--ranks", "1,2,9,10000"]
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    assert main([*args, "--json", str(first), "-o", str(tmp_path / "p.html")]) == 0
    table = capsys.readouterr().out
    assert main([*args, "--json", str(second)]) == 0
    assert capsys.readouterr().out == table
    assert first.read_bytes() == second.read_bytes()
    assert "ddp (bucket_mb=25" in table and "allreduce (gradient)" in table
    records = json.loads(first.read_text())
    assert [(r["spec"]["strategy"], r["spec"]["world_size"], r["status"]) for r in records][:5] \
        == [("ddp", 1, "success"), ("ddp", 2, "success"), ("ddp", 9, "success"),
            ("ddp", 10000, "success"), ("hybrid", 1, "skipped")]
    assert all(r["spec"]["task"] == "prediction" for r in records)
    html = (tmp_path / "p.html").read_text()
    assert "Predicted scaling efficiency" in html and "hep_cnn (predicted)" in html
    assert main(["report", str(first)]) == 0
    markdown = capsys.readouterr().out
    assert "## Predictions" in markdown and "## Training" not in markdown
    assert main(["compare", str(first), str(second)]) == 0


def test_validate_and_calibration(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["predict", "--validate", str(store)]) == 0
    out = capsys.readouterr().out
    assert "ddp2" in out and "1 of 1 predictions within 15%" in out
    assert main(["predict", "--calibration", "--calibrate-from", str(store)]) == 0
    out = capsys.readouterr().out
    assert "gloo  allreduce" in out and "residuals gloo allreduce x2" in out and "single" in out
    assert "none measured: no single-rank fsdp" in out


def test_fsdp_own_work_is_listed_and_priced(store: Path, tmp_path: Path, run_record,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    fsdp1 = run_record([0.40] * 3, comm="gloo", strategy="fsdp", run_id="fsdp1")
    (store / "fsdp1.json").write_text(json.dumps(fsdp1))
    assert main(["predict", "--calibration", "--calibrate-from", str(store)]) == 0
    out = capsys.readouterr().out
    listing = out[out.index("strategies' own work"):]
    assert "fsdp1" not in out[:out.index("strategies' own work")]  # not a compute run
    assert "fsdp" in listing and "400" in listing and "320" in listing and "80" in listing
    assert main(["predict", "hep_cnn", "--calibrate-from", str(store), "--strategy", "fsdp",
                 "--ranks", "2"]) == 0
    out = capsys.readouterr().out
    assert "fsdp's own work: 80 ms a step (fsdp at 1 rank 400.0 ms - compute 320.0 ms" in out
    fsdp2 = run_record([0.45] * 3, world_size=2, comm="gloo", strategy="fsdp", run_id="fsdp2")
    (store / "fsdp2.json").write_text(json.dumps(fsdp2))
    target = tmp_path / "v.json"
    assert main(["predict", "--validate", str(store), "--json", str(target)]) == 0
    out = capsys.readouterr().out
    assert "fsdp's own work 80.0 ms a step, measured at 1 rank" in out
    assert "fsdp1" not in out.split("predictions within")[0]  # calibration, not a row
    by_run = {r["validation"]["measured_run_id"]: r for r in json.loads(target.read_text())}
    assert by_run["fsdp2"]["prediction"]["calibration"]["overhead"] == ["fsdp1"]
    assert "overhead" not in by_run["ddp2"]["prediction"]["calibration"]


@pytest.mark.parametrize(("extra", "message"), [
    (["--network", "warp-drive"], "--network 'warp-drive': cannot read"),
    (["--ranks", "0,2"], "expected a positive integer"),
    (["--strategy", "allreduce-everything"], "unknown strategy"),
    (["--comm", "mpi"], "no calibration records for comm backend 'mpi'"),
    (["--strategy-opt", "G=2"], "no strategy of ddp takes it"),
])
def test_bad_input_exits_2_with_one_line(store: Path, capsys: pytest.CaptureFixture[str],
                                         extra: list[str], message: str) -> None:
    assert main(["predict", "hep_cnn", "--calibrate-from", str(store), *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert main(["predict"]) == 2


def test_this_machine_calibrates_by_default_another_with_machine_each_record_named(
        tmp_path: Path, run_record, comm_record, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A store of two machines' runs: this machine's hardware calibrates and is named with
    every record used, in the text and the JSON; --machine takes the other's; a free network
    keeps ddp at 0.95 or more at 1,024 ranks from eight noisy steps (one 3x hiccup)."""
    from harness.machine.hardware import hardware_key
    from harness.predict import machine

    folder = tmp_path / "store"
    folder.mkdir()
    machines = {"zen4": {"cpu_vendor": "AuthenticAMD", "cpu_family": 25,
                         "cpu_model_number": 17, "cpus_usable": 2},
                "zen1": {"cpu_vendor": "AuthenticAMD", "cpu_family": 23,
                         "cpu_model_number": 1, "cpus_usable": 2}}
    noisy = [0.30, 0.31, 0.29, 0.90, 0.30, 0.31, 0.30, 0.29]
    for name, fields in machines.items():
        for record in (run_record(noisy if name == "zen4" else [0.9] * 8, run_id=f"{name}-1"),
                       comm_record("allreduce", 4e-4, 1e-9, run_id=f"{name}-comm")):
            record["machine"].update(fields)
            (folder / f"{record['run_id']}.json").write_text(json.dumps(record))
    monkeypatch.setattr(machine, "this_hardware",
                        lambda: hardware_key({**run_record([1.0])["machine"],
                                              **machines["zen4"]}))
    out = tmp_path / "p.json"
    args = ["predict", "hep_cnn", "--calibrate-from", str(folder), "--ranks", "1,1024"]
    assert main([*args, "--network", "alpha=0,beta=0", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "calibration: AMD Zen 4, 2 cores (this machine's hardware): compute zen4-1" in text
    assert "zen1" not in text and "not priced: 8 measured step(s)" in text
    assert "rank wait ms" in text and "*" not in text  # no row marked, no footnote
    records = json.loads(out.read_text())
    assert records[1]["spec"]["world_size"] == 1024
    efficiency = next(m["value"] for m in records[1]["metrics"]
                      if m["name"] == "scaling_efficiency")
    assert efficiency >= 0.95
    used = records[1]["prediction"]["calibration"]
    assert used["machine"] == "AMD Zen 4, 2 cores"
    assert used["records"] == [{"run_id": "zen4-1", "machine": "AMD Zen 4, 2 cores",
                                "use": "compute"}]
    assert main([*args, "--machine", "AMD Zen 1, 2 cores"]) == 0
    text = capsys.readouterr().out
    assert "calibration: AMD Zen 1, 2 cores (--machine): compute zen1-1; network zen1-comm" in text
    assert "zen4" not in text
    assert main([*args, "--machine", "nope"]) == 2
    assert "it holds AMD Zen 1, 2 cores (2 records); AMD Zen 4, 2 cores (2 records)" in \
        capsys.readouterr().err


def test_the_footnote_follows_only_a_table_with_a_row_it_marks(
        store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """It was printed under every prediction, even at 0.4% communication."""
    args = ["predict", "hep_cnn", "--calibrate-from", str(store), "--ranks", "1,64"]
    note = "* communication takes longer than compute"
    assert main([*args, "--network", "alpha=0,beta=0"]) == 0
    assert note not in capsys.readouterr().out
    assert main([*args, "--network", "alpha=1e-3,beta=1e-6"]) == 0
    table = capsys.readouterr().out.split("ddp (")[1]
    marked = [line for line in table.splitlines() if "%*" in line]
    assert [line.split()[0] for line in marked] == ["64"]
    assert table.splitlines()[table.splitlines().index(marked[0]) + 1].startswith(note)
