"""Each kind of record, as harness/spec/kinds.py declares it: which kind a spec is, the fields
that make two records of it the same experiment, its key and its labels."""
from __future__ import annotations

import json
from typing import Any

import pytest

from harness.spec.fields import identity, spec_key
from harness.spec.kinds import (
    COLLECTIVE,
    DOCTOR,
    IDENTITY_FIELDS,
    KERNEL,
    KEY_FIELDS,
    KINDS,
    PREDICTION,
    TRAINING,
    kind_of,
    record_kind,
    spec_of,
)
from harness.spec.specs import RUN_FIELDS, CommSpec, RunSpec

RUN = RunSpec(workload="lstm", size="tiny", comm="gloo", nproc_per_node=2, batch_per_rank=20,
              suite="scaling")


def collective(**changes: Any) -> dict[str, Any]:
    """A spec as `dtbench comm` writes it for one operation."""
    spec = json.loads(json.dumps(CommSpec(comm="gloo", sizes=(4096, 64 * 2**20)).as_dict()))
    return {**spec, "op": "allreduce", "workload": "comm-allreduce", "size": "-",
            "precision": "fp32", "env": {}, **changes}


def kernel(**changes: Any) -> dict[str, Any]:
    """A spec as `dtbench kernels` writes it."""
    return {"task": "kernel", "workload": "kernel-conv", "family": "conv", "kernel": "conv 3x3",
            "shape": {"n": 1, "c": 3}, "pass": "forward", "algorithm": "direct",
            "precision": "fp32", "backend": "cpu", "threads": 2, "size": "-", "comm": "none",
            "launcher": "local", "world_size": 1, "nnodes": 1, "mode": "kernel", "set": "quick",
            "group": "g", "sources": ["DeepBench"], "warmup": 1, "min_reps": 3, "max_reps": 9,
            "budget_s": 1.0, "env": {}, **changes}


def prediction(**changes: Any) -> dict[str, Any]:
    """A spec as `dtbench predict` writes it (harness/predict/records.py)."""
    return {"task": "prediction", "workload": "lstm", "size": "small", "backend": "cpu",
            "comm": "gloo", "launcher": "model", "precision": "fp32", "world_size": 4,
            "nnodes": 4, "nproc_per_node": 1, "batch_per_rank": 20, "global_batch": 80,
            "steps": 0, "warmup": 0, "mode": "prediction", "strategy": "ddp",
            "strategy_options": {}, "scaling": "weak", "network": "1 Gbit/s",
            "network_assumed": True, "algorithm": "ring", "compute": "measured",
            "compute_assumed": False, **changes}


def doctor(**changes: Any) -> dict[str, Any]:
    """A spec as `dtbench doctor` writes it."""
    return {"task": "doctor", "workload": "doctor", "size": "-", "precision": "-",
            "backend": "cpu", "env": {"OMP_NUM_THREADS": "2"}, **changes}


@pytest.mark.parametrize(("spec", "kind"), [
    ({}, TRAINING), ({"task": None}, TRAINING), ({"task": "train"}, TRAINING),
    (RUN.as_dict(), TRAINING), (collective(), COLLECTIVE), (kernel(), KERNEL),
    (prediction(), PREDICTION), (doctor(), DOCTOR), ([1, 2], TRAINING), (None, TRAINING)])
def test_a_spec_is_of_the_kind_its_task_names(spec: Any, kind: Any) -> None:
    assert kind_of(spec) is kind
    assert record_kind({"spec": spec}) is kind


def test_a_task_no_kind_declares_is_a_kind_of_its_own_read_by_its_run_fields() -> None:
    spec = {**RUN.as_dict(), "task": "replay"}
    other = kind_of(spec)
    assert other not in KINDS and other.name == "replay" and other.measured
    assert other.key(spec) != TRAINING.key(spec)  # its whole spec, not a run's key
    assert other.identity(spec) == TRAINING.identity(spec)
    assert kind_of({"task": ["comm"]}).name == "['comm']"  # any JSON, never an exception


def test_every_kind_has_its_own_task_and_name_and_only_predictions_are_computed() -> None:
    assert len({kind.task for kind in KINDS}) == len({kind.name for kind in KINDS}) == 5
    assert [kind.name for kind in KINDS if not kind.measured] == ["prediction"]


def test_spec_of_rebuilds_the_spec_object_the_ranks_run() -> None:
    assert spec_of(RUN.as_dict()) == RUN
    comm = CommSpec(comm="gloo", sizes=(1024,))
    assert spec_of(comm.as_dict()) == comm


# ---------------------------------------------------------------------------- training

def test_training_identity_is_the_declared_fields_and_the_suite_its_key_the_runs() -> None:
    spec = RUN.as_dict()
    found = TRAINING.identity(spec)
    assert found == {**identity(spec, RUN_FIELDS), "suite": "scaling"}
    assert set(found) - {"bucket_mb", "compression"} <= set(IDENTITY_FIELDS)
    assert "seed" not in found and "env" not in found
    assert TRAINING.key(spec) == RUN.key() == spec_key(spec, RUN_FIELDS)
    assert TRAINING.key({**spec, "seed": 7}) == RUN.key()
    assert TRAINING.key(RUN.replace(batch_per_rank=40).as_dict()) != RUN.key()


def test_training_labels_name_what_the_run_set() -> None:
    spec = RUN.as_dict()
    # ranks per node follow from ranks and nodes; defaults (ddp, local) are left out
    assert TRAINING.label(spec) == "lstm/tiny cpu fp32 x2 comm=gloo batch_size=20 suite=scaling"
    assert TRAINING.label(spec, only=("workload", "comm")) == "lstm/tiny cpu fp32 x2 comm=gloo"
    assert TRAINING.short_label(spec) == "tiny/cpu/fp32/gloo/ws2/bs20"
    assert TRAINING.short_label({**spec, "mode": "ttt"}) == "tiny/cpu/fp32/gloo/ws2/bs20/ttt"


# ---------------------------------------------------------------------------- collective

def test_a_collective_is_its_common_fields_operation_and_largest_message() -> None:
    spec = collective()
    assert COLLECTIVE.identity(spec) == {
        **{name: spec.get(name) for name in KEY_FIELDS}, "op": "allreduce",
        "largest_message": 64 * 2**20}
    # busbw is measured at the largest message: smaller ones and the repetitions do not count
    assert COLLECTIVE.identity(collective(sizes=[1024, 64 * 2**20], iters=5)) \
        == COLLECTIVE.identity(spec)
    assert COLLECTIVE.identity(collective(op="broadcast")) != COLLECTIVE.identity(spec)
    assert COLLECTIVE.identity(collective(world_size=4)) != COLLECTIVE.identity(spec)


def test_a_collectives_key_is_its_whole_spec_its_short_label_names_the_message() -> None:
    spec = collective()
    assert COLLECTIVE.key(spec) == COLLECTIVE.key(dict(reversed(list(spec.items()))))
    assert COLLECTIVE.key(collective(iters=5)) != COLLECTIVE.key(spec)
    assert COLLECTIVE.short_label(spec) == "cpu/fp32/gloo/ws2/allreduce/64M"
    assert COLLECTIVE.label(spec) == "comm-allreduce/- cpu fp32 x2 comm=gloo warmup=5 threads=1"
    assert "nnodes=2" in COLLECTIVE.label(collective(nnodes=2, world_size=4))


# ---------------------------------------------------------------------------- kernel

def test_a_kernel_is_paired_by_kernel_pass_algorithm_and_threads() -> None:
    spec = kernel()
    found = KERNEL.identity(spec)
    assert {name: found[name] for name in ("kernel", "pass", "algorithm", "threads")} == {
        "kernel": "conv 3x3", "pass": "forward", "algorithm": "direct", "threads": 2}
    assert set(found) == {*KEY_FIELDS, "kernel", "pass", "algorithm", "threads"}
    assert KERNEL.identity(kernel(set="full", budget_s=9.0)) == found
    assert KERNEL.identity(kernel(threads=4)) != found


def test_a_kernels_key_hashes_what_names_it_not_its_set_or_timing() -> None:
    spec = kernel()
    assert len(KERNEL.key(spec)) == 16
    assert KERNEL.key(kernel(set="full", sources=["x"], budget_s=9.0, warmup=5)) \
        == KERNEL.key(spec)
    for change in ({"threads": 4}, {"shape": {"n": 2, "c": 3}}, {"family": "gemm"},
                   {"precision": "bf16"}):
        assert KERNEL.key(kernel(**change)) != KERNEL.key(spec), change
    assert KERNEL.label(spec) == KERNEL.short_label(spec) == "conv 3x3/forward/direct/cpu/fp32/t2"


# ---------------------------------------------------------------------------- prediction

def test_a_prediction_is_identified_as_the_run_it_predicts_and_keyed_without_calibration(
        ) -> None:
    spec = prediction()
    assert PREDICTION.identity(spec) == TRAINING.identity(spec)
    calibrated_again = prediction(compute="borrowed", compute_assumed=True, global_batch=64)
    assert PREDICTION.key(calibrated_again) == PREDICTION.key(spec)
    assert PREDICTION.key(prediction(world_size=8)) != PREDICTION.key(spec)
    assert PREDICTION.short_label(spec) == "small/cpu/fp32/gloo/ws4/bs20/prediction"
    assert PREDICTION.label(spec).startswith("lstm/small cpu fp32 x4 ")


# ---------------------------------------------------------------------------- doctor

def test_a_doctor_record_is_read_by_its_run_fields_and_keyed_by_its_whole_spec() -> None:
    spec = doctor()
    assert DOCTOR.identity(spec) == TRAINING.identity(spec)
    assert DOCTOR.key(doctor(env={"OMP_NUM_THREADS": "1"})) != DOCTOR.key(spec)
    assert DOCTOR.key(spec) == DOCTOR.key(dict(spec))
    assert DOCTOR.label(spec) == "doctor/- cpu - x-"


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
def test_every_kind_reads_an_empty_spec_without_an_exception(kind: Any) -> None:
    assert isinstance(kind.identity({}), dict)
    assert isinstance(kind.key({}), str) and kind.key({})
    assert isinstance(kind.label({}), str) and isinstance(kind.short_label({}), str)
