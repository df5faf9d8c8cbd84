"""The CI gate's power curve: how often `dtbench gate` catches a slowdown of 2, 3, 5 and 10%,
and how often it alarms when nothing changed, per workload and for the gate as a whole
(issue 55 item 1).

One pool of invocations of what the gate runs (default the shipped `quick --repeat 3`), made
once and interleaved in time: each round a same-commit invocation before each slowed one
(`--straggler 0:F`, F = 1 / (1 - slowdown): rank 0 idles (F - 1) x its compute each step;
with --work busy it computes for that time instead, as slower code would, so that its CPU
time grows too). Gates are then assembled from the pool and decided as `dtbench gate` decides
them (harness/compare/power.py, in this process), for each --gate and each --clock (wall: the
step times as recorded; cpu: the processes' CPU time instead; probe: each step over the speed
probe timed after it, for pools whose --run has --speed-probe):

    history         each invocation against the 10 same-commit invocations nearest it in
                    time, each one commit of main (the shipped gate, against the history)
    history:G       the same with every G invocations of one slowdown, consecutive in its
                    order, one commit (an invocation of G times the repeats, spread in time)
    interleaved:K   K slowed (or same-commit) invocations against the K same-commit ones run
                    just before each, disjoint blocks (dtbench gate --interleave K)

The pool is kept in --keep DIR: running again with the same DIR resumes it (an invocation cut
short is made again), --budget-hours stops starting invocations when the next would pass the
budget, and --evaluate-only decides gates from what DIR holds; --floor-decides decides them
as `dtbench gate --floor-decides` does. Where what measures changed
part way through a pool (resumed with other code), --break N decides the gates of each part
apart: no gate's history reaches across N. A round of the shipped
configuration is 8 invocations of about 100 s on a 2-core VM: 10 rounds (40 same-commit
invocations, 10 per slowdown) take about 2.5 hours.

    python benchmarks/bench_gate_power.py --keep power-shipped --rounds 10 --budget-hours 3
    python benchmarks/bench_gate_power.py --keep power-shipped --evaluate-only \\
        --gate history --gate interleaved:1 --gate interleaved:3
    python benchmarks/bench_gate_power.py --keep power-short --rounds 10 \\
        --run "quick --repeat 9 --max-time 4" --gate history --gate interleaved:3
    python benchmarks/bench_gate_power.py --keep power-busy --run "quick --speed-probe" \\
        --work busy --slowdown 3 --slowdown 5 --rounds 15 --clock wall --clock cpu \\
        --clock probe --gate history --gate interleaved:2 --gate interleaved:3

Prints figures, asserts nothing; run it alone on a quiet machine.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import io
import json
import shlex
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_false_alarms import cpu, dtbench, records_in  # noqa: E402
from harness.compare import power  # noqa: E402
from harness.compare.gate import GATE_RUN  # noqa: E402

PLAN, MANIFEST = "plan.json", "manifest.jsonl"


def folder_of(root: Path, index: int, level: float) -> Path:
    return root / "runs" / f"{index:03d}-{'same' if level == 0 else f'slow{level:g}'}"


def finished(root: Path) -> dict[int, dict[str, Any]]:
    """The invocations the pool holds, from its manifest (one line each, written when done)."""
    path = root / MANIFEST
    if not path.exists():
        return {}
    entries = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {entry["index"]: entry for entry in entries}


def check_plan(root: Path, run: str, slowdowns: list[float], work: str) -> None:
    """A pool is one configuration: resuming it with another is refused."""
    path = root / PLAN
    wanted = {"run": run, "slowdowns": slowdowns, "work": work}
    if path.exists():
        kept = {"work": "idle", **json.loads(path.read_text())}  # older pools slept
        if {k: kept.get(k) for k in wanted} != wanted:
            raise SystemExit(f"{root}: holds a pool of {kept}; name another --keep DIR for "
                             f"{wanted}")
    else:
        root.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(wanted) + "\n")


def make_pool(root: Path, run: str, slowdowns: list[float], rounds: int,
              budget_hours: float | None, work: str = "idle") -> None:
    """Run the pool's invocations that DIR lacks, in plan order, within the budget."""
    done = finished(root)
    levels = power.plan(rounds, slowdowns)
    started, made = time.monotonic(), [entry["seconds"] for entry in done.values()]
    for index, level in enumerate(levels):
        if index in done:
            continue
        typical = statistics.median(made) if made else 0.0
        if budget_hours is not None and time.monotonic() - started + typical > budget_hours * 3600:
            print(f"budget of {budget_hours:g} h spent: {len(finished(root))} of {len(levels)} "
                  "invocations in the pool; run again with the same --keep to go on", flush=True)
            return
        out = folder_of(root, index, level)
        shutil.rmtree(out, ignore_errors=True)  # an invocation cut short is made again
        extra = ["--straggler", f"0:{power.straggler_factor(level):.6g}",
                 "--straggler-work", work] if level else []
        begun = time.monotonic()
        result = dtbench("run", *shlex.split(run), *extra, "-q", "--machine", "bench",
                         "--out", str(out))
        seconds = time.monotonic() - begun
        if result.returncode not in (0, 1) or not out.is_dir():
            raise SystemExit(f"invocation {index}: exit {result.returncode}\n"
                             f"{result.stderr[-2000:]}")
        with (root / MANIFEST).open("a") as stream:
            stream.write(json.dumps({"index": index, "slowdown_pct": level, "seconds": seconds,
                                     "exit": result.returncode,
                                     "finished_at": datetime.datetime.now().isoformat()}) + "\n")
        made.append(seconds)
        print(f"{index + 1}/{len(levels)}: {'same commit' if not level else f'{level:g}% slower'}"
              f", {seconds:.0f} s", flush=True)


def load_pool(root: Path) -> list[power.Invocation]:
    return [power.Invocation(index, entry["slowdown_pct"],
                             tuple(records_in(folder_of(root, index, entry["slowdown_pct"]))),
                             entry["seconds"])
            for index, entry in sorted(finished(root).items())]


def report(pool: list[power.Invocation], modes: list[str], threshold: float, run: str,
           clocks: list[str], work: str = "idle", breaks: list[int] | None = None,
           floor_decides: bool = False) -> dict[str, Any]:
    """Each clock's and gate mode's curve as a table, the slowdown actually injected on each
    clock, the setup; each taken within the pool's segments (cut before each of `breaks`),
    the gates decided as `dtbench gate [--floor-decides]` decides them."""
    breaks = breaks or []
    workloads = sorted({w for inv in pool for w in power.throughputs(inv)})
    found: dict[str, Any] = {"machine": cpu(), "date": datetime.date.today().isoformat(),
                             "run": run, "work": work, "invocations": len(pool),
                             "threshold": threshold, "modes": {}, "injected": {},
                             "spread": {}, "breaks": breaks, "floor_decides": floor_decides}
    print(f"\nmachine: {cpu()}; {datetime.date.today()}; each invocation: dtbench run {run}; "
          f"straggler {work}; {len(pool)} invocations, median "
          f"{statistics.median(i.seconds for i in pool):.0f} s"
          + (f"; cut before invocation(s) {', '.join(map(str, breaks))}" if breaks else "")
          + ("; gates decided with --floor-decides" if floor_decides else ""))
    decider = functools.partial(power.decide, floor_decides=floor_decides)
    for clock in clocks:
        timed = power.on_clock(pool, clock)
        for mode in modes:
            with contextlib.redirect_stderr(io.StringIO()):  # compare's warnings, once a gate
                outcomes = power.evaluate(timed, mode, threshold, decider, breaks)
            points = power.curve(outcomes, workloads)
            print("\n" + power.table(points, workloads, f"{mode}, {clock} clock"))
            short = [f"{p.slowdown_pct:g}%: {p.gates}" for p in points
                     if p.gates < (20 if p.slowdown_pct == 0 else 10)]
            if short:
                print(f"(fewer gates than 20 same-commit / 10 slowed: {', '.join(short)}; "
                      "more --rounds)")
            found["modes"][f"{mode}/{clock}"] = [p.as_dict() for p in points]
        injected = power.injected(timed, breaks)
        print(f"\nslowdown injected on the {clock} clock, as measured (1 - slowed / "
              "same-commit median throughput):")
        print("| asked | " + " | ".join(workloads) + " |\n|" + "---|" * (len(workloads) + 1))
        for level, per_workload in injected.items():
            print(f"| {level:g}% | " + " | ".join(f"{per_workload.get(w, float('nan')):.1f}%"
                                                  for w in workloads) + " |")
        found["injected"][clock] = {str(k): v for k, v in injected.items()}
        spreads = power.spread(timed, breaks)
        print(f"same-commit invocations on the {clock} clock, coefficient of variation of "
              "their median throughputs: " + ", ".join(f"{w} {v:.1f}%"
                                                       for w, v in spreads.items()))
        found["spread"][clock] = spreads
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", required=True, type=Path,
                        help="the pool's directory: made, resumed, or (--evaluate-only) read")
    parser.add_argument("--run", default=GATE_RUN,
                        help=f"what each invocation runs (default: {GATE_RUN!r}, the shipped "
                        "gate)")
    parser.add_argument("--rounds", type=int, default=10,
                        help="rounds of the plan: each a same-commit invocation before each "
                        "slowed one (default 10)")
    parser.add_argument("--slowdown", type=float, action="append", metavar="PCT",
                        help=f"a slowdown to inject, repeatable (default {power.SLOWDOWNS})")
    parser.add_argument("--gate", action="append", metavar="MODE",
                        help="history, history:G (each commit G invocations of the pool, "
                        "as --repeat G would make) or interleaved:K, repeatable (default "
                        "history)")
    parser.add_argument("--work", choices=("idle", "busy"), default="idle",
                        help="what the slowed rank does for its extra time: idle (sleeps) or "
                        "busy (computes, as slower code would; its CPU time grows too); "
                        "default idle")
    parser.add_argument("--clock", action="append", choices=power.CLOCKS,
                        help="decide the gates on this clock, repeatable: wall (what dtbench "
                        "gate reads by default), cpu (the processes' CPU time) or probe (each "
                        "step over the speed probe, for runs with --speed-probe); default wall")
    parser.add_argument("--threshold", type=float, default=5.0,
                        help="the gate's threshold, percent (default 5)")
    parser.add_argument("--budget-hours", type=float,
                        help="start no invocation that would end past this many hours")
    parser.add_argument("--evaluate-only", action="store_true",
                        help="decide gates from the invocations DIR holds; run nothing")
    parser.add_argument("--first", type=int, default=0, metavar="N",
                        help="decide gates from invocations N and later only (a pool resumed "
                        "with changed code; default 0: all)")
    parser.add_argument("--break", dest="breaks", type=int, action="append", metavar="N",
                        help="what measures changed before invocation N (a pool resumed with "
                        "other code): gates, spreads and slowdowns are taken on each side of "
                        "it, never across; repeatable")
    parser.add_argument("--floor-decides", action="store_true",
                        help="decide the gates as `dtbench gate --floor-decides` does: at run "
                        "level a change beyond the history's floor fails whatever the runs' "
                        "interval says")
    parser.add_argument("--json", dest="json_file", type=Path, help="write the figures here")
    args = parser.parse_args()
    slowdowns = sorted(args.slowdown or power.SLOWDOWNS)
    modes = args.gate or ["history"]
    for mode in modes:
        power.gates_of([], mode)  # an unknown mode is refused before hours of runs
    if not args.evaluate_only:
        check_plan(args.keep, args.run, slowdowns, args.work)
        make_pool(args.keep, args.run, slowdowns, args.rounds, args.budget_hours, args.work)
    pool = [run for run in load_pool(args.keep) if run.index >= args.first]
    if not pool:
        raise SystemExit(f"{args.keep}: no finished invocation to evaluate")
    kept = json.loads((args.keep / PLAN).read_text())
    found = report(pool, modes, args.threshold, kept["run"], args.clock or ["wall"],
                   kept.get("work", "idle"), args.breaks, args.floor_decides)
    if args.json_file:
        args.json_file.write_text(json.dumps(found, indent=1) + "\n")


if __name__ == "__main__":
    main()
