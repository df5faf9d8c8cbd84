"""results/: the published records regenerate results/report.md and results/report.html
byte for byte."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from harness.commands.cli import main
from harness.records.record import load_record

ROOT = Path(__file__).resolve().parents[3]
RESULTS = ROOT / "results"


def published_json(folder: str) -> list[Path]:
    """The .json files committed directly in `folder` (a working tree may hold more:
    `results/add-machine.sh` writes there before its records are added with git add -f)."""
    try:
        listed = subprocess.run(["git", "ls-files", folder], cwd=ROOT, capture_output=True,
                                text=True, check=True, timeout=60).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return sorted((ROOT / folder).glob("*.json"))
    depth = folder.count("/") + 1
    return sorted(ROOT / name for name in listed
                  if name.endswith(".json") and name.count("/") == depth)


def published_records() -> list[Path]:
    """The store's records committed under results/ (results/<machine>/<commit or date>/):
    cpu-config/ and predict/ hold benchmark outputs of their own."""
    from harness.store.directory import Store

    try:
        listed = set(subprocess.run(["git", "ls-files", "results"], cwd=ROOT,
                                    capture_output=True, text=True, check=True,
                                    timeout=60).stdout.split())
    except (OSError, subprocess.SubprocessError):
        return Store(RESULTS).record_paths()
    return [path for path in Store(RESULTS).record_paths()
            if path.relative_to(ROOT).as_posix() in listed]


def test_published_records_lie_under_their_machine() -> None:
    """Each record sits in the folder the store gives it: its machine, then its commit or day."""
    from harness.store.directory import record_folder

    for path in published_records():
        assert path.parent.relative_to(RESULTS).as_posix() == record_folder(load_record(path))


def test_results_hold_quick_suite_comm_sweep_and_scaling_records() -> None:
    records = [load_record(path) for path in published_records()]
    assert records, "no published records under results/"
    suites = {r["spec"].get("suite") for r in records}
    assert {"standard", "scaling"} <= suites
    assert any(r["spec"].get("task") == "comm" for r in records)
    assert any(m["name"] == "scaling_efficiency" for r in records for m in r["metrics"])
    # Measured, or skipped with the reason (bf16 LSTM on a CPU without AVX-512); never failed.
    assert all(r["status"] == "success" or (r["status"] == "skipped" and r["error"])
               for r in records if r["spec"].get("task") != "kernel")


# The kernel sets published in results/ (`dtbench kernels --set NAME` for each): `full` adds
# the workloads' convolutions, about half an hour on two cores, and is left to the
# command in docs/guide/kernels.md.
PUBLISHED_KERNEL_SETS = ("deepbench", "sweep")


def test_results_hold_whole_kernel_sets() -> None:
    """Every kernel, pass and algorithm of each published set: measured, or skipped as not
    applicable; none failed. Together they cover each family and the kernel-size sweep."""
    from harness.microbench.kernels.runner import planned_steps
    from harness.microbench.kernels.sets import SWEEP_KERNEL_SIZES, get_set

    kernels = [r for r in map(load_record, published_records())
               if r["spec"].get("task") == "kernel"]
    assert {r["spec"]["set"] for r in kernels} == set(PUBLISHED_KERNEL_SETS)
    by_machine: dict[str, list[dict[str, Any]]] = {}
    for record in kernels:
        by_machine.setdefault(record["machine"]["hardware_key"], []).append(record)
    for machine, records in by_machine.items():  # each machine's sets whole
        for name in PUBLISHED_KERNEL_SETS:
            in_set = [r for r in records if r["spec"]["set"] == name]
            assert len(in_set) == planned_steps(get_set(name).cases()), (machine, name)
    assert {r["status"] for r in kernels} == {"success", "skipped"}
    assert all(r["error"].startswith("not applicable") for r in kernels
               if r["status"] == "skipped")
    measured = [r for r in kernels if r["status"] == "success"]
    assert {r["spec"]["family"] for r in measured} == {"memory", "gemm", "conv", "lstm"}
    swept = {r["spec"]["shape"]["r"] for r in measured if r["spec"]["group"] == "sweep"}
    assert swept == set(SWEEP_KERNEL_SIZES)


def _regenerate(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> bytes:
    """`dtbench report results/ -o results/NAME` over a copy of the published records."""
    copy = tmp_path / "results"
    copy.mkdir()
    for path in published_records():
        (copy / path.relative_to(RESULTS)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, copy / path.relative_to(RESULTS))
    monkeypatch.chdir(tmp_path)
    assert main(["report", "results/", "-o", f"results/{name}"]) == 0
    return (copy / name).read_bytes()


def test_results_report_regenerates_identically(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    assert _regenerate("report.md", tmp_path, monkeypatch) == (RESULTS / "report.md").read_bytes()


def test_every_machine_is_identified_and_has_the_standard_suite() -> None:
    """No record without its CPU's family and model; every machine folder with training
    records holds the standard suite; the hand-written README stays short."""
    records = [load_record(path) for path in published_records()]
    assert all(r["machine"].get("cpu_family") is not None
               and r["machine"].get("cpu_model_number") is not None for r in records)
    machines: dict[str, set[Any]] = {}
    for path, record in zip(published_records(), records, strict=True):
        machines.setdefault(path.relative_to(RESULTS).parts[0], set()).add(
            record["spec"].get("suite"))
    trained = {m for m, suites in machines.items() if suites - {None}}
    assert trained and all("standard" in machines[m] for m in trained)
    assert len((RESULTS / "README.md").read_text().splitlines()) < 150


# The matplotlib that drew the published plots: another version may rasterise differently.
PUBLISHED_WITH_MATPLOTLIB = "3.11.2"
_PNG = re.compile(rb"data:image/png;base64,[A-Za-z0-9+/=]+")


def test_results_html_report_regenerates_identically(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """results/report.html (tables and the roofline plot): its text byte for byte, and its
    images too under the matplotlib that drew them."""
    import matplotlib

    regenerated = _regenerate("report.html", tmp_path, monkeypatch)
    published = (RESULTS / "report.html").read_bytes()
    assert _PNG.sub(b"PNG", regenerated) == _PNG.sub(b"PNG", published)
    if matplotlib.__version__ != PUBLISHED_WITH_MATPLOTLIB:
        pytest.skip(f"plots drawn with matplotlib {PUBLISHED_WITH_MATPLOTLIB}, this is "
                    f"{matplotlib.__version__}: text compared, images not")
    assert regenerated == published


PREDICT = RESULTS / "predict"


def test_prediction_validation_table_regenerates_byte_for_byte() -> None:
    """results/predict/validation.md is bench_predict.py's table of the records beside it:
    the same records give the same bytes, and it covers the configurations
    docs/guide/prediction.md names."""
    from harness.predict.inputs import load_calibration
    from harness.predict.validate import validate, validation_markdown

    paths = [str(path) for path in published_json("results/predict")]
    assert paths, "no published prediction records under results/predict"
    records = load_calibration(tuple(paths), [])
    rows = validate(records, records)
    published = (PREDICT / "validation.md").read_text()
    command = published.split("Regenerate: `")[1].split("`")[0]
    assert validation_markdown(rows, command) == published
    assert validation_markdown(validate(records, records), command) == published
    measured = {(r.strategy, r.record["spec"]["comm"], r.record["spec"]["world_size"], r.link)
                for r in rows if r.error is not None}
    assert {s for s, *_ in measured} >= {"ddp", "fsdp", "pipeline", "ps-sync"}
    assert {c for _, c, *_ in measured} == {"gloo", "mpi"}
    assert {n for _, _, n, _ in measured} >= {2, 3, 4}
    assert sum("tbf" in link for *_, link in measured) >= 3, measured
