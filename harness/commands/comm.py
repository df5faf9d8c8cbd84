"""`dtbench comm`: launch the collective microbenchmark, store one record per collective."""
from __future__ import annotations

import argparse
import sys
from typing import Any

from harness.commands.options import (
    add_launch_options,
    add_output_options,
    add_threads_option,
    int_list,
    json_target,
    non_negative_int,
    positive_int,
    write_json,
)
from harness.core.errors import RunFailed, SkipRun, UsageError, status_of
from harness.core.text import one_line, render_table, size_label
from harness.machine.fingerprint import (
    harness_info,
    machine_info,
    software_info,
    with_nodes,
)
from harness.microbench.collectives import CommResult, fold, parse_ops, parse_sizes
from harness.records.record import Metric, build_record, measured, new_run_id, utc_now
from harness.run.guard import check_rendezvous, check_threads
from harness.run.progress import Progress
from harness.run.supervisor import Supervisor
from harness.spec.specs import CommSpec, performance_env
from harness.store.targets import destination, open_writer


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from harness.commands.run import registry_choices

    choices = registry_choices()
    parser.add_argument("--comm", default="gloo", choices=choices["comm"],
                        help="the communication backend measured")
    parser.add_argument("--op", default="allreduce",
                        help="comma list of allreduce, allgather, reducescatter, broadcast")
    parser.add_argument("--sizes", default="1K:64M",
                        help="bytes: 4M, a power-of-two range 1K:64M, or a comma list")
    parser.add_argument("--iters", type=positive_int, default=20,
                        help="timed iterations per op and size")
    parser.add_argument("--warmup", type=non_negative_int, default=5,
                        help="untimed iterations first")
    add_threads_option(parser, per_rank=True)
    parser.add_argument("--oversubscribe", action="store_true",
                        help="run even when ranks x threads exceed 4x the usable cores")
    launch = add_launch_options(parser)
    launch.add_argument("--launcher", default="local", choices=choices["launcher"],
                        help="how ranks start (mpirun for --comm mpi)")
    launch.add_argument("-n", "--nproc", type=int_list, default=None, metavar="N",
                        help="ranks per node (default 2)")
    launch.add_argument("--nnodes", type=positive_int, metavar="N", help="nodes (default 1)")
    add_output_options(parser, "the records")


def _records(spec: CommSpec, results: list[CommResult], status: str, error: str | None,
             created: Any, run_id: str, nodes: list[Any]) -> list[dict[str, Any]]:
    machine = with_nodes(machine_info(), spec.nnodes, nodes)
    software = software_info()
    records = []
    for op in spec.ops:
        rows = [r for r in results if r.op == op]
        metrics: list[Metric] = []
        if rows:
            largest, smallest = rows[-1], rows[0]
            per_size = [{"bytes": r.bytes, "time_s": r.time_s, "algbw": r.algbw,
                         "busbw": r.busbw} for r in rows]
            metrics = [
                measured("busbw", largest.busbw, samples=largest.samples_busbw,
                         extra={"bytes": largest.bytes, "per_size": per_size}),
                measured("algbw", largest.algbw, extra={"bytes": largest.bytes}),
                measured("latency", smallest.time_s, extra={"bytes": smallest.bytes}),
            ]
        spec_dict = {**spec.as_dict(), "op": op, "workload": f"comm-{op}", "size": "-",
                     "precision": "fp32", "env": performance_env()}
        records.append(build_record(
            run_id=f"{run_id}-{op}", created=created, status=status, error=error,
            harness=harness_info(), machine=machine, software=software, spec=spec_dict,
            metrics=metrics, events=[], extra={"spec_key": None, "notes": {}}))
    return records


def comm_table(results: list[CommResult]) -> str:
    rows = [[r.op, size_label(r.bytes, compact=True), f"{r.time_s * 1e6:.1f}", f"{r.algbw:.3f}",
             f"{r.busbw:.3f}"] for r in results]
    return render_table(("op", "size", "time us", "algbw GB/s", "busbw GB/s"), rows)


def command(args: argparse.Namespace) -> int:
    if args.nproc and len(args.nproc) > 1:
        raise UsageError(f"-n {','.join(map(str, args.nproc))}: a comm run takes one rank count")
    from harness.commands.run import launch_options

    nprocs = args.nproc or [2]
    spec = CommSpec(comm=args.comm, launcher=args.launcher, nproc_per_node=nprocs[0],
                    nnodes=args.nnodes or 1, ops=parse_ops(args.op), sizes=parse_sizes(args.sizes),
                    iters=args.iters, warmup=args.warmup, threads=args.threads or 1)
    check_rendezvous(spec, launch_options(args))
    check_threads(spec.world_size if spec.nnodes == 1 else spec.nproc_per_node, spec.threads,
                  args.oversubscribe)
    if spec.comm == "none":
        raise UsageError("--comm none: a comm run needs a communication backend: gloo, mpi or "
                         "nccl")
    store = open_writer(args.out)
    json_file = json_target(args, store.root)
    store.ensure_writable()
    created = utc_now()
    run_id = new_run_id("comm", created)
    progress = Progress(1, enabled=not args.quiet)
    progress.begin(f"comm {spec.comm} {spec.launcher} ws={spec.world_size} "
                   f"{','.join(spec.ops)}")
    results: list[CommResult] = []
    nodes: list[Any] = []
    from backends import first_unavailable

    status, error = "success", first_unavailable([("comm", spec.comm),
                                                  ("launcher", spec.launcher)])
    if error is not None:
        status = "skipped"
    else:
        try:
            gathered = Supervisor(spec, launch_options(args), run_id, progress.update).run()
            if gathered is None:
                progress.end(f"node {args.node_rank} done; node 0 writes the records")
                return 0
            results = fold(spec, gathered)
            nodes = [rank.get("node") for rank in gathered]
        except (SkipRun, RunFailed) as exc:
            status, error = status_of(exc)
    progress.end(status if error is None else f"{status}: {one_line(error, 160)}")
    records = _records(spec, results, status, error, created, run_id, nodes)
    for record in records:
        store.add(record)
    if results:
        print(comm_table(results))
    else:
        print(f"{status}: {error}")
    print(f"records: {destination(store)}", file=sys.stderr)
    write_json(json_file, records)
    return 1 if status == "failed" else 0
