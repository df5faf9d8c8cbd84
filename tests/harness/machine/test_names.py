"""Machine identity and provenance: the microarchitecture named from family/model numbers,
the label a reader recognises, the MLPerf-style system description, and the code under test
(commit, branch, dirty, CI URL) that every training record carries."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from harness.machine.names import machine_label, microarchitecture, system_description
from harness.records.provenance import Provenance, ci_url, code_under_test

AMD, INTEL = "AuthenticAMD", "GenuineIntel"


@pytest.mark.parametrize("vendor, family, model, stepping, name", [
    (AMD, 23, 1, 2, "Zen 1"),         # EPYC 7001 (Naples), seen here
    (AMD, 23, 49, 0, "Zen 2"),        # EPYC 7002 (Rome)
    (AMD, 25, 1, 1, "Zen 3"),         # EPYC 7003 (Milan), seen here
    (AMD, 25, 17, 1, "Zen 4"),        # EPYC 9004 (Genoa), seen here
    (AMD, 26, 2, 1, "Zen 5"),         # EPYC 9005 (Turin)
    (INTEL, 6, 0x55, 4, "Skylake"),
    (INTEL, 6, 0x55, 7, "Cascade Lake"),
    (INTEL, 6, 0x8F, 8, "Sapphire Rapids"),
    (INTEL, 6, 0xCF, 2, "Emerald Rapids"),
    (INTEL, 6, 0xAD, 1, "Granite Rapids"),
    (AMD, 27, 3, 0, "AMD family 27 model 3"),         # unknown: its numbers, not a guess
    (INTEL, 6, 0x12, 0, "Intel family 6 model 18"),
])
def test_microarchitecture_from_family_and_model(vendor: str, family: int, model: int,
                                                 stepping: int, name: str) -> None:
    machine = {"cpu_vendor": vendor, "cpu_family": family, "cpu_model_number": model,
               "cpu_stepping": stepping}
    assert microarchitecture(machine) == name


def test_arm_cores_are_named_by_part_number() -> None:
    assert microarchitecture({"cpu_vendor": "0x41", "cpu_part": 0xD4F}) == "Neoverse V2"
    assert microarchitecture({"cpu_vendor": "0x41", "cpu_part": "0xd0c"}) == "Neoverse N1"


def test_label_names_cpu_cores_accelerators_and_nodes() -> None:
    machine = {"cpu_vendor": AMD, "cpu_family": 25, "cpu_model_number": 17, "cpus_usable": 2}
    assert machine_label(machine) == "AMD Zen 4, 2 cores"
    gpus = [{"name": "NVIDIA H100"}, {"name": "NVIDIA H100"}]
    assert machine_label({**machine, "gpus": gpus, "nodes": 2}) == \
        "AMD Zen 4, 2 cores, 2× NVIDIA H100, 2 nodes"
    assert machine_label({**machine, "name": "ci-runner-3"}) == "ci-runner-3"


def test_system_description_in_mlperf_terms() -> None:
    machine = {"cpu_vendor": INTEL, "cpu_family": 6, "cpu_model_number": 0x8F,
               "cpu_model": "Intel(R) Xeon(R) Platinum 8480+", "sockets": 2, "cpus_usable": 112,
               "gpus": [{"name": "NVIDIA H100"}] * 8, "nodes": 1, "os": "Linux",
               "interconnect": {"type": "infiniband", "speed_mbps": 400000}}
    desc = system_description(machine, {"torch": "2.13.0"})
    assert desc["host_processor_model_name"] == "Intel(R) Xeon(R) Platinum 8480+"
    assert desc["host_processor_microarchitecture"] == "Sapphire Rapids"
    assert (desc["host_processors_per_node"], desc["host_processor_core_count"]) == (2, 112)
    assert (desc["accelerator_model_name"], desc["accelerators_per_node"]) == ("NVIDIA H100", 8)
    assert desc["number_of_nodes"] == 1 and desc["framework"] == "PyTorch 2.13.0"
    assert desc["host_networking"] == "infiniband 400000 Mb/s"


def test_ci_urls_of_the_common_services() -> None:
    assert ci_url({"GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "o/r",
                   "GITHUB_RUN_ID": "42"}) == "https://github.com/o/r/actions/runs/42"
    assert ci_url({"CI_JOB_URL": "https://gitlab.example/o/r/-/jobs/7"}) == \
        "https://gitlab.example/o/r/-/jobs/7"
    assert ci_url({}) is None


def _git(directory: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(directory), "-c", "user.name=t",
                           "-c", "user.email=t@example.com", *args], check=True,
                          capture_output=True, text=True).stdout.strip()


def test_code_under_test_from_the_checkout_or_the_command_line(tmp_path: Path) -> None:
    _git(tmp_path, "init", "-q", "-b", "feature")
    (tmp_path / "model.py").write_text("x = 1\n")
    _git(tmp_path, "add", "model.py")
    _git(tmp_path, "commit", "-q", "-m", "first")
    head = _git(tmp_path, "rev-parse", "HEAD")
    code = code_under_test(directory=tmp_path, environ={})
    assert code == {"commit": head, "branch": "feature", "dirty": False, "ci_url": None}
    (tmp_path / "model.py").write_text("x = 2\n")
    assert code_under_test(directory=tmp_path, environ={})["dirty"] is True
    given = code_under_test("abc123", directory=tmp_path, environ={"GITHUB_REF_NAME": "main"})
    assert given == {"commit": "abc123", "branch": "main", "dirty": None, "ci_url": None}
    assert code_under_test(directory=tmp_path / "nowhere", environ={})["commit"] is None


def test_machine_name_and_code_reach_the_record_and_the_csv(tmp_path: Path) -> None:
    from harness.report import csv_format
    from harness.report.view import RecordView
    from harness.run.runner import Runner
    from harness.spec.specs import RunSpec
    from harness.store.directory import Store

    spec = RunSpec(workload="hep_cnn", size="tiny", batch_per_rank=4, steps=2, warmup=1,
                   threads=1)
    outcome = Runner(Store(tmp_path / "store"),
                     provenance=Provenance(machine="box-a", commit="c0ffee")).run(spec)
    assert outcome is not None and outcome.status == "success", outcome.record["error"]
    record = outcome.record
    assert record["machine"]["name"] == "box-a"
    assert record["machine"]["microarchitecture"] == microarchitecture(record["machine"])
    assert record["code"]["commit"] == "c0ffee"
    rows = csv_format.render([RecordView.of(record)]).splitlines()
    header = rows[0].split(",")
    first = rows[1].split(",")
    assert first[header.index("machine")] == "box-a"
    assert first[header.index("commit")] == "c0ffee"
