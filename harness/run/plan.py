"""Turn a suite and command-line options into the list of validated, fully resolved specs.

What neither the command line nor the suite sets, the planner reads from the workload and the
machine (batch, steps, threads, backend) or else takes from the spec's declared defaults
(harness/spec/specs.py): no default is written here."""
from __future__ import annotations

import itertools
import os
from typing import Any

from harness.core.errors import UsageError
from harness.run.spec_checks import validate
from harness.run.suites import Suite
from harness.spec.fields import legacy_options, multi_keys
from harness.spec.specs import (
    COMPILE_MODES,
    DEFAULT_MAX_TIME,
    DEFAULT_TARGET_CI,
    IPEX_MODES,
    OPTION_FIELDS,
    RUN_FIELDS,
    RunSpec,
    performance_env,
    run_fields,
    spec_defaults,
)
from harness.strategies import STRATEGIES

# The default of --peak where the command line and the suite say nothing (e.g. cached in tests).
PEAK_ENV = "DTBENCH_PEAK"
# Command-line options that may be given several times; one run per combination.
MULTI_KEYS = multi_keys(RUN_FIELDS)
# How often each combination runs where neither the command line nor the suite says.
REPEAT = next(f.field_default for f in OPTION_FIELDS if f.name == "repeat")


def best_backend() -> str:
    from backends import COMPUTE_BACKENDS

    return "cuda" if COMPUTE_BACKENDS.get("cuda").availability().available else "cpu"


def backend_precisions(options: dict[str, Any]) -> list[str]:
    """`precision = "all"` in a suite: every precision the run's backend supports."""
    from backends import COMPUTE_BACKENDS

    backend = options.get("backend") or "auto"
    return list(COMPUTE_BACKENDS.get(best_backend() if backend == "auto" else backend)
                .precisions)


def resolve(options: dict[str, Any], suite_name: str | None,
            spec_class: type[RunSpec] = RunSpec) -> RunSpec:
    """A full spec from one run's options: defaults from the workload preset and the machine,
    else the spec's declared ones."""
    from workloads import get_workload

    default = spec_defaults(spec_class)
    backend = options.get("backend") or "auto"
    nproc = options.get("nproc") or default["nproc_per_node"]
    nnodes = options.get("nnodes") or default["nnodes"]
    world = nproc * nnodes
    strategy = STRATEGIES.get(options.get("strategy") or default["strategy"])
    if backend == "auto":
        # gloo and MPI runs are host runs (validate says why); GPUs talk over NCCL, so a
        # strategy that cannot use it runs on the host too
        host = world > 1 and (options.get("comm") in ("gloo", "mpi")
                              or "nccl" not in strategy.comms)
        backend = "cpu" if host else best_backend()
    workload = get_workload(options["workload"])
    size = options.get("size") or default["size"]
    preset = workload.preset(size)
    threads = options.get("threads") or default["threads"]
    if not threads and backend == "cpu":
        threads = max(1, len(os.sched_getaffinity(0)) // nproc)
    comm = options.get("comm") or (default["comm"] if world == 1 else
                                   "nccl" if backend == "cuda" else "gloo")
    mode = options.get("mode") or default["mode"]
    values: dict[str, Any] = dict(
        workload=workload.name, size=size, backend=backend, comm=comm,
        # MPI ranks are started by MPI: with --comm mpi the launcher defaults to mpirun.
        launcher=options.get("launcher") or ("mpirun" if comm == "mpi" and world > 1
                                             else default["launcher"]),
        precision=options.get("precision") or default["precision"],
        nproc_per_node=nproc, nnodes=nnodes,
        batch_per_rank=options.get("batch_size") or preset.default_batch(backend),
        steps=options.get("steps") or preset.steps,
        warmup=preset.warmup if options.get("warmup") is None else options["warmup"],
        **measurement({**options, "mode": mode},
                      (strategy.synchronous and strategy.all_step) or world == 1),
        mode=mode,
        seed=options.get("seed") or default["seed"],
        threads=threads,
        channels_last=(workload.image_model if options.get("channels_last") is None
                       else bool(options["channels_last"]) and workload.image_model),
        compile=compile_mode(options.get("compile")) == "on",
        compile_mode=compile_mode(options.get("compile")),
        ipex=ipex_mode(options.get("ipex")) == "on",
        ipex_mode=ipex_mode(options.get("ipex")),
        data=options.get("data"),
        strategy=strategy.name,
        strategy_options=strategy.parse_options(strategy_options(options, strategy.name)),
        straggler=parse_straggler(options.get("straggler")),
        peak=options.get("peak") or os.environ.get(PEAK_ENV) or default["peak"],
        suite=suite_name,
        env=tuple(performance_env().items()),
    )
    # A declared field the planner does not settle above takes its option's value as given.
    values.update({f.spec_name: options[f.name] for f in run_fields(spec_class)
                   if f.suite is not None and f.spec_name is not None
                   and f.spec_name not in values and options.get(f.name) is not None})
    spec = spec_class(**values)
    replicas = strategy.replicas(spec)
    if replicas != spec.world_size:
        spec = spec.replace(replicas=replicas)
    return validate(spec)


def measurement(options: dict[str, Any], together: bool) -> dict[str, Any]:
    """How long a run measures: a throughput run until its figure's 95% interval is within
    --target-ci (percent) or --max-time is spent, with the workload's step count as the least;
    a fixed count with --steps, for time-to-train, and where ranks do not step together (an
    asynchronous strategy's workers cannot all stop on rank 0's word without waiting, and a
    serving rank, such as ps-sync's server, never hears it)."""
    target, budget = options.get("target_ci"), options.get("max_time")
    if options.get("steps") and target is not None:
        raise UsageError("--steps measures exactly that many steps and --target-ci until the "
                         "figure is that precise: give one of them")
    if options["mode"] != "throughput" or options.get("steps"):
        return {"target_ci": None, "max_time": None}
    if not together:
        if target is not None or budget is not None:
            raise UsageError(f"--strategy {options.get('strategy')}: its workers do not step "
                             "together, so they cannot all stop on a precision target; give "
                             "--steps (or neither --target-ci nor --max-time)")
        return {"target_ci": None, "max_time": None}
    return {"target_ci": float(target or DEFAULT_TARGET_CI),
            "max_time": float(budget or DEFAULT_MAX_TIME)}


def switch_mode(option: str, value: Any, modes: tuple[str, ...]) -> str:
    """--compile / --ipex MODE (or a suite's true/false) as one of `modes`; absent: default
    (a cached measured win, else off)."""
    if value is None:
        return "default"
    if isinstance(value, bool):
        return "on" if value else "off"
    if value not in modes:
        raise UsageError(f"--{option} {value!r}: choose from {', '.join(modes)}")
    return str(value)


def compile_mode(value: Any) -> str:
    return switch_mode("compile", value, COMPILE_MODES)


def ipex_mode(value: Any) -> str:
    return switch_mode("ipex", value, IPEX_MODES)


def strategy_options(options: dict[str, Any], strategy: str) -> dict[str, Any]:
    """--strategy-opt pairs, with --bucket-mb and --compression as ddp's options."""
    raw = dict(options.get("strategy_options") or {})
    for name in legacy_options(RUN_FIELDS, "ddp"):
        if options.get(name) is not None:
            if strategy != "ddp":
                raise UsageError(f"--{name.replace('_', '-')} is an option of --strategy ddp, "
                                 f"not of {strategy}")
            raw.setdefault(name, options[name])
    return raw


def parse_straggler(text: Any) -> tuple[int, float] | None:
    """'RANK:FACTOR' (e.g. '1:3') -> (1, 3.0); None when not given."""
    if text in (None, ""):
        return None
    rank, sep, factor = str(text).partition(":")
    try:
        parsed = (int(rank), float(factor))
    except ValueError:
        parsed = None
    if not sep or parsed is None or parsed[0] < 0 or not parsed[1] >= 1.0 \
            or parsed[1] == float("inf"):
        raise UsageError(f"--straggler {text!r}: expected RANK:FACTOR with a rank >= 0 and a "
                         "finite factor >= 1, e.g. 1:3")
    return parsed


def plan_runs(suite: Suite | None, cli: dict[str, Any],
              spec_class: type[RunSpec] = RunSpec) -> list[tuple[RunSpec, int]]:
    """(spec, repeat) pairs: suite runs with command-line options laid over them.

    A command-line value replaces the suite's; `-w` given with a suite selects its runs.
    """
    overrides = {k: v for k, v in cli.items() if v not in (None, [], ())}
    selected = overrides.pop("workload", None)
    if suite is None:
        if not selected:
            raise UsageError("no workload given: name a suite or use -w/--workload")
        base_runs: list[dict[str, Any]] = [{"workload": name} for name in selected]
    elif suite.kernels is not None:
        raise UsageError(f"suite {suite.name} runs kernel benchmarks, not training runs: "
                         f"use dtbench run {suite.name} or dtbench kernels")
    else:
        base_runs = [dict(run) for run in suite.runs]
        if selected:
            unknown = sorted(set(selected) - {r["workload"] for r in base_runs})
            if unknown:
                from workloads import WORKLOADS

                WORKLOADS.get(unknown[0])
                raise UsageError(f"suite {suite.name} has no run of workload {unknown[0]!r}")
            base_runs = [r for r in base_runs if r["workload"] in selected]
    multi = {k: overrides.pop(k) for k in multi_keys(run_fields(spec_class)) if k in overrides}
    planned: list[tuple[RunSpec, int]] = []
    seen: set[RunSpec] = set()
    for run in base_runs:
        keys = list(multi)
        for combination in itertools.product(*(multi[k] for k in keys)) if keys else [()]:
            options = {**run, **overrides, **dict(zip(keys, combination, strict=True))}
            repeat = options.pop("repeat", REPEAT) or REPEAT
            precisions = (backend_precisions(options) if options.get("precision") == "all"
                          else [options.get("precision")])
            for precision in precisions:
                spec = resolve({**options, "precision": precision}, suite.name if suite else None,
                               spec_class)
                if spec not in seen:
                    seen.add(spec)
                    planned.append((spec, repeat))
    return planned
