"""`dtbench doctor`: is this node as it should be? Compute peak per precision, memory bandwidth,
collective bandwidth between the node's ranks, each GPU's health, the software and the settings
that move figures; a verdict per check, a record like any other. `--fleet` puts many nodes'
doctor records side by side and names the ones that stand out."""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from harness.commands.options import add_backend_option, add_output_options
from harness.core.errors import EXIT_FAILED, EXIT_OK, UsageError
from harness.core.text import one_line, render_table

PRECISIONS = ("fp32", "bf16")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_backend_option(parser)
    parser.add_argument("--fleet", nargs="+", metavar="PATH",
                        help="compare the doctor records in these stores, machine folders, "
                        "record files or PostgreSQL URLs, each node against the fleet median; "
                        "exit 1 when a node stands out (default: none, check this node)")
    parser.add_argument("--no-collectives", action="store_true",
                        help="leave out the collective checks between the node's ranks")
    add_output_options(parser, "the doctor record")


def _say(args: argparse.Namespace, text: str) -> None:
    if not args.quiet:
        print(f"doctor: {text}", file=sys.stderr, flush=True)


def collective_check(comm: str, nproc: int, run_id: str) -> Any:
    """allreduce busbw of `nproc` ranks of this node over `comm`, through the same launch as
    `dtbench comm`; a backend or launcher missing here is said, not failed."""
    from backends import first_unavailable
    from harness.core.errors import RunFailed, SkipRun
    from harness.core.spec import CommSpec, LaunchOptions
    from harness.microbench.collectives import fold
    from harness.run.doctor import COLLECTIVE_BYTES, FAIL, PASS, NodeCheck
    from harness.run.supervisor import Supervisor

    launcher = "mpirun" if comm == "mpi" else "local"
    name = f"allreduce_{comm}"
    missing = first_unavailable([("comm", comm), ("launcher", launcher)])
    if missing is not None:
        return NodeCheck(name, "network", None, "GB/s", "runs", PASS, f"not checked: {missing}")
    spec = CommSpec(comm=comm, launcher=launcher, nproc_per_node=nproc, ops=("allreduce",),
                    sizes=(COLLECTIVE_BYTES,), iters=10, warmup=3, threads=1)
    try:
        gathered = Supervisor(spec, LaunchOptions(rank_timeout=60.0), f"{run_id}-{comm}",
                              lambda *a: None).run()
        busbw = fold(spec, gathered or [])[0].busbw
    except (RunFailed, SkipRun, IndexError) as exc:
        return NodeCheck(name, "network", None, "GB/s", "runs", FAIL, one_line(str(exc), 160))
    return NodeCheck(name, "network", busbw, "GB/s", "no preset for the node's own link",
                     PASS, f"{nproc} ranks, 16 MiB, busbw as nccl-tests defines it; compare "
                     "it with the fleet", higher_is_better=True)


def node_checks(args: argparse.Namespace, backend: str, run_id: str) -> list[Any]:
    import torch

    from backends import COMPUTE_BACKENDS, nvml
    from harness.machine.fingerprint import machine_info, software_info
    from harness.microbench.peak import measure_peak
    from harness.run.doctor import (
        compute_checks,
        health_checks,
        settings_checks,
        software_checks,
    )

    machine = machine_info()
    gpus = nvml.gpu_inventory()
    availability = {name: COMPUTE_BACKENDS.get(name).availability() for name in COMPUTE_BACKENDS}
    backends = {name: {"available": found.available, "reason": found.reason}
                for name, found in availability.items()}

    def measure(precision: str) -> Any:
        _say(args, f"GEMM peak {precision} on {backend}")
        return measure_peak(backend, precision, budget_s=2.0,
                            sustain_s=4.0 if backend == "cuda" else 0.0)

    checks = compute_checks(backend, machine, PRECISIONS, measure)
    if not args.no_collectives:
        cores = int(machine.get("cpus_usable") or 1)
        if backend == "cuda" and torch.cuda.device_count() >= 2:
            _say(args, "NCCL allreduce")
            checks.append(collective_check("nccl", torch.cuda.device_count(), run_id))
        elif backend == "cuda":
            from harness.run.doctor import PASS, NodeCheck

            checks.append(NodeCheck("allreduce_nccl", "network", None, "GB/s", "runs", PASS,
                                    "not checked: one GPU, an NCCL collective needs two"))
        elif backend == "cpu":
            for comm in ("gloo", "mpi"):
                _say(args, f"{comm} allreduce")
                checks.append(collective_check(comm, 2 if cores >= 2 else 1, run_id))
    for gpu in gpus:
        checks += health_checks(nvml.device_health(gpu["index"], gpu.get("uuid")),
                                f"gpu{gpu['index']}")
    checks += software_checks(software_info(), gpus, backends)
    checks += settings_checks(machine)
    return checks


def doctor_record(checks: list[Any], backend: str, run_id: str, created: Any) -> dict[str, Any]:
    from harness.core.spec import performance_env
    from harness.machine.fingerprint import harness_info, machine_info, software_info
    from harness.records.record import build_record, measured
    from harness.run.doctor import verdict_of

    metrics = [measured(f"doctor_{check.name}", float(check.value), unit=check.unit,
                        higher_is_better=bool(check.higher_is_better),
                        extra={"verdict": check.verdict, "expected": check.expected,
                               "reason": check.reason, "group": check.group})
               for check in checks if check.measured]
    verdict = verdict_of(checks)
    spec = {"task": "doctor", "workload": "doctor", "size": "-", "precision": "-",
            "backend": backend, "env": performance_env()}
    return build_record(
        run_id=run_id, created=created, status="success", error=None, harness=harness_info(),
        machine=machine_info(), software=software_info(), spec=spec, metrics=metrics,
        events=[], extra={"spec_key": None, "notes": {
            "verdict": verdict, "checks": [c.as_dict() for c in checks],
            "failed": [c.name for c in checks if c.verdict == "fail"],
            "warned": [c.name for c in checks if c.verdict == "warn"]}})


def _value(check: Any) -> str:
    if check.value is None:
        return "-"
    if isinstance(check.value, float):
        number = f"{check.value:,.0f}" if abs(check.value) >= 1000 else f"{check.value:.4g}"
        return f"{number} {check.unit}".strip()
    return f"{check.value} {check.unit}".strip()


def checks_table(checks: list[Any]) -> str:
    rows = [[c.group, c.name, _value(c), one_line(str(c.expected), 48), c.verdict.upper(),
             one_line(c.reason, 90)] for c in checks]
    return render_table(("group", "check", "value", "expected", "verdict", "reason"), rows)


def fleet_command(args: argparse.Namespace) -> int:
    from harness.compare.fleet import fleet, outlier_lines
    from harness.store.sources import load_inputs

    loaded = load_inputs(args.fleet)
    for warning in loaded.warnings:
        print(f"dtbench: warning: {warning}", file=sys.stderr)
    nodes, figures = fleet(loaded.records)
    if not nodes:
        raise UsageError(f"no successful doctor records in {', '.join(args.fleet)}")
    rows = []
    for figure in figures:
        low = min(figure.values, key=figure.values.__getitem__)
        high = max(figure.values, key=figure.values.__getitem__)
        rows.append([figure.name.removeprefix("doctor_"), figure.unit, str(len(figure.values)),
                     f"{figure.median:.4g}", f"{figure.values[low]:.4g} ({low})",
                     f"{figure.values[high]:.4g} ({high})",
                     ", ".join(sorted(figure.outliers)) or "-"])
    print(f"{len(nodes)} node(s): {', '.join(nodes)}")
    print(render_table(("figure", "unit", "nodes", "median", "lowest", "highest",
                        "stands out"), rows))
    lines = outlier_lines(figures)
    for line in lines:
        print(f"  ! {line}")
    if not lines:
        print("no node stands out (median absolute deviation rule, docs/guide/doctor.md)")
    return EXIT_FAILED if lines else EXIT_OK


def command(args: argparse.Namespace) -> int:
    if args.fleet:
        return fleet_command(args)
    from harness.commands.options import json_target, write_json
    from harness.records.record import new_run_id, utc_now
    from harness.run.doctor import verdict_of
    from harness.run.plan import best_backend
    from harness.store.targets import destination, open_writer

    backend = best_backend() if args.backend == "auto" else args.backend
    if backend not in ("cpu", "cuda"):
        raise UsageError(f"--backend {backend}: choose cpu, cuda or auto")
    store = open_writer(args.out)
    json_file = json_target(args, store.root)
    store.ensure_writable()
    created = utc_now()
    run_id = new_run_id("doctor", created)
    started = time.perf_counter()
    checks = node_checks(args, backend, run_id)
    record = doctor_record(checks, backend, run_id, created)
    store.add(record)
    print(checks_table(checks))
    verdict = verdict_of(checks)
    counts = {v: sum(c.verdict == v for c in checks) for v in ("pass", "warn", "fail")}
    print(f"\n{verdict.upper()}: {counts['pass']} pass, {counts['warn']} warn, "
          f"{counts['fail']} fail ({time.perf_counter() - started:.0f} s); record in "
          f"{destination(store)}")
    write_json(json_file, [record])
    return EXIT_FAILED if verdict == "fail" else EXIT_OK
