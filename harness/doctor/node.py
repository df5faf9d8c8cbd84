"""This node's checks (`dtbench doctor`): compute peak per precision (on a GPU node every GPU
at once, a child process each), memory bandwidth, collective bandwidth between the node's
ranks (NCCL across all its GPUs), each GPU's health, the software and the settings that move
figures; then the record and the table."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.core.text import one_line, render_table
from harness.doctor.checks import (
    COLLECTIVE_BYTES,
    FAIL,
    GPU_COLLECTIVE_BYTES,
    PASS,
    NodeCheck,
    compute_checks,
    health_checks,
    settings_checks,
    software_checks,
    verdict_of,
)

PRECISIONS = ("fp32", "bf16")


def collective_busbw(comm: str, nproc: int, run_id: str, sizes: tuple[int, ...]
                     ) -> tuple[float | None, str | None]:
    """The best allreduce busbw of `nproc` ranks of this node over `comm` among `sizes`,
    through the same launch as `dtbench comm`; (None, why) where it did not run."""
    from backends import first_unavailable
    from harness.core.errors import RunFailed, SkipRun
    from harness.microbench.collectives import fold
    from harness.run.supervisor import Supervisor
    from harness.spec.specs import CommSpec, LaunchOptions

    launcher = "mpirun" if comm == "mpi" else "local"
    missing = first_unavailable([("comm", comm), ("launcher", launcher)])
    if missing is not None:
        return None, f"not checked: {missing}"
    spec = CommSpec(comm=comm, launcher=launcher, nproc_per_node=nproc, ops=("allreduce",),
                    sizes=sizes, iters=10, warmup=3, threads=1)
    try:
        gathered = Supervisor(spec, LaunchOptions(rank_timeout=60.0), f"{run_id}-{comm}",
                              lambda *a: None).run()
        return max(result.busbw for result in fold(spec, gathered or [])), None
    except (RunFailed, SkipRun, ValueError) as exc:
        return None, one_line(str(exc), 160)


def cpu_collective_check(comm: str, nproc: int, run_id: str) -> NodeCheck:
    """allreduce busbw between CPU ranks; a backend or launcher missing here is said, not
    failed."""
    name = f"allreduce_{comm}"
    busbw, why = collective_busbw(comm, nproc, run_id, (COLLECTIVE_BYTES,))
    if busbw is None:
        missing = why is not None and why.startswith("not checked")
        return NodeCheck(name, "network", None, "GB/s", "runs", PASS if missing else FAIL,
                         why or "no result")
    return NodeCheck(name, "network", busbw, "GB/s", "no preset for the node's own link",
                     PASS, f"{nproc} ranks, 16 MiB, busbw as nccl-tests defines it; compare "
                     "it with the fleet", higher_is_better=True)


def gpu_node_checks(machine: dict[str, Any], run_id: str, collectives: bool,
                    say: Callable[[str], None]) -> list[NodeCheck]:
    """Every GPU of the node at once, then NCCL across all of them."""
    import torch

    from harness.doctor.gpus import gpu_checks, measure_gpus, nccl_check

    count = torch.cuda.device_count()
    if count == 0:
        return [NodeCheck("gpus", "compute", 0, "", "a CUDA GPU", FAIL,
                          "--backend cuda but torch sees no CUDA device")]
    say(f"GEMM peak {', '.join(PRECISIONS)} on {count} GPU(s) at once")
    checks = gpu_checks(measure_gpus(count, PRECISIONS), machine, PRECISIONS)
    if not collectives:
        return checks
    if count < 2:
        return [*checks, NodeCheck("allreduce_nccl", "network", None, "GB/s", "runs", PASS,
                                   "not checked: one GPU, an NCCL collective needs two")]
    say(f"NCCL allreduce across {count} GPUs")
    busbw, why = collective_busbw("nccl", count, run_id, GPU_COLLECTIVE_BYTES)
    return [*checks, nccl_check(busbw, GPU_COLLECTIVE_BYTES, count,
                                machine.get("gpu_topology"), why)]


def node_checks(backend: str, run_id: str, collectives: bool = True,
                say: Callable[[str], None] = lambda text: None) -> list[NodeCheck]:
    """Every check of this node, in the table's order."""
    from backends import COMPUTE_BACKENDS, nvml
    from harness.machine.fingerprint import machine_info, software_info
    from harness.microbench.peak import measure_peak

    machine = machine_info()
    gpus = nvml.gpu_inventory()
    availability = {name: COMPUTE_BACKENDS.get(name).availability() for name in COMPUTE_BACKENDS}
    backends = {name: {"available": found.available, "reason": found.reason}
                for name, found in availability.items()}
    if backend == "cuda":
        checks = gpu_node_checks(machine, run_id, collectives, say)
    else:
        def measure(precision: str) -> Any:
            say(f"GEMM peak {precision} on {backend}")
            return measure_peak(backend, precision, budget_s=2.0, sustain_s=0.0)

        checks = compute_checks(backend, machine, PRECISIONS, measure)
        if collectives:
            cores = int(machine.get("cpus_usable") or 1)
            for comm in ("gloo", "mpi"):
                say(f"{comm} allreduce")
                checks.append(cpu_collective_check(comm, 2 if cores >= 2 else 1, run_id))
    for gpu in gpus:
        checks += health_checks(nvml.device_health(gpu["index"], gpu.get("uuid")),
                                f"gpu{gpu['index']}")
    checks += software_checks(software_info(), gpus, backends)
    checks += settings_checks(machine)
    return checks


def doctor_record(checks: list[NodeCheck], backend: str, run_id: str,
                  created: Any) -> dict[str, Any]:
    from harness.machine.fingerprint import harness_info, machine_info, software_info
    from harness.records.record import build_record, measured
    from harness.spec.specs import performance_env

    metrics = [measured(f"doctor_{check.name}", float(check.value), unit=check.unit,
                        higher_is_better=bool(check.higher_is_better),
                        extra={"verdict": check.verdict, "expected": check.expected,
                               "reason": check.reason, "group": check.group})
               for check in checks if check.measured]
    spec = {"task": "doctor", "workload": "doctor", "size": "-", "precision": "-",
            "backend": backend, "env": performance_env()}
    return build_record(
        run_id=run_id, created=created, status="success", error=None, harness=harness_info(),
        machine=machine_info(), software=software_info(), spec=spec, metrics=metrics,
        events=[], extra={"spec_key": None, "notes": {
            "verdict": verdict_of(checks), "checks": [c.as_dict() for c in checks],
            "failed": [c.name for c in checks if c.verdict == FAIL],
            "warned": [c.name for c in checks if c.verdict == "warn"]}})


def _value(check: NodeCheck) -> str:
    if check.value is None:
        return "-"
    if isinstance(check.value, float):
        number = f"{check.value:,.0f}" if abs(check.value) >= 1000 else f"{check.value:.4g}"
        return f"{number} {check.unit}".strip()
    return f"{check.value} {check.unit}".strip()


def checks_table(checks: list[NodeCheck]) -> str:
    rows = [[c.group, c.name, _value(c), one_line(str(c.expected), 48), c.verdict.upper(),
             one_line(c.reason, 90)] for c in checks]
    return render_table(("group", "check", "value", "expected", "verdict", "reason"), rows)
