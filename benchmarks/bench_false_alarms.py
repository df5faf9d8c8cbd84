"""The CI gate's false-alarm rate and power: N runs of one commit on one machine, and
`dtbench compare` of every pair of them (each run in turn the baseline): every exit 1 is a
false alarm, since nothing changed. Then M runs slowed on purpose (`--straggler 0:FACTOR`
idles the rank (FACTOR - 1) x its forward and backward time every step), each compared with
a normal run: every exit 1 is a slowdown caught. Prints the rates, the alarms' lines, the
spread of the run-to-run ratios and the slowdown actually injected; writes them as JSON.

    python benchmarks/bench_false_alarms.py                        # 11 runs, 55 pairs
    python benchmarks/bench_false_alarms.py --runs 12 --run-args "quick --steps 20"

The default measures what .github/workflows/benchmark.yml runs. Prints figures, asserts
nothing; run it alone (it is a benchmark: nothing else on the machine).
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW_ARGS = "quick --repeat 3"
MATCH_WITHOUT_STRAGGLER = "workload,backend,comm,launcher,precision,size,mode,world_size"


def dtbench(*args: str) -> subprocess.CompletedProcess[str]:
    """`dtbench ARGS` of this checkout's code, run in the caller's directory (so that a
    relative --out lands where the caller looks for it)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    return subprocess.run([sys.executable, "-m", "harness", *args], env=env, text=True,
                          capture_output=True)


def records_in(store: Path) -> list[dict[str, Any]]:
    """The records a run's store holds (its index and other files left out)."""
    found = [json.loads(path.read_text()) for path in sorted(store.rglob("*.json"))]
    return [record for record in found if isinstance(record, dict) and "spec" in record]


def cpu() -> str:
    try:
        fields = {key.strip(): value for key, value in (
            line.split(":", 1) for line in Path("/proc/cpuinfo").read_text().splitlines()
            if ":" in line)}
        return (f"{fields.get('model name', '?').strip()} (family "
                f"{fields.get('cpu family', '?').strip()} model "
                f"{fields.get('model', '?').strip()})")
    except OSError:
        return platform.processor() or "unknown CPU"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=11, help="runs of the commit (default 11)")
    parser.add_argument("--run-args", default=WORKFLOW_ARGS,
                        help=f"what each run runs (default: {WORKFLOW_ARGS!r})")
    parser.add_argument("--threshold", default="5", help="compare's --threshold (default 5)")
    parser.add_argument("--slowed", type=int, default=0,
                        help="runs slowed by --straggler 0:FACTOR, for the power (default 0)")
    parser.add_argument("--factor", type=float, default=1.12,
                        help="the slowed runs' straggler factor (default 1.12: about 10%% "
                        "less throughput; the measured drop is printed)")
    parser.add_argument("--keep", help="keep the stores in this directory")
    parser.add_argument("--json", dest="json_file", help="write the figures here")
    parser.add_argument("--reuse", action="store_true",
                        help="compare the runs already in --keep's directory again (after a "
                        "change to compare) instead of running them")
    args = parser.parse_args()
    root = Path(args.keep or tempfile.mkdtemp(prefix="bench-false-alarms-"))
    stores, slowed = [], []
    durations: list[float] = []
    # normal and slowed runs alternate, so that both sample the machine at the same times
    plan = [("run", i) for i in range(args.runs)]
    for i in range(args.slowed):
        plan.insert(2 * i + 1, ("slowed", i))
    if args.reuse and not args.keep:
        parser.error("--reuse needs --keep DIR (the directory of an earlier invocation)")
    for kind, i in plan:
        out = root / f"{kind}-{i:02d}"
        if args.reuse:
            if not out.is_dir():
                raise SystemExit(f"--reuse: {out} is missing")
            (slowed if kind == "slowed" else stores).append(out)
            continue
        started = time.monotonic()
        extra = ["--straggler", f"0:{args.factor:g}"] if kind == "slowed" else []
        done = dtbench("run", *shlex.split(args.run_args), *extra, "-q", "--machine", "bench",
                       "--out", str(out))
        if done.returncode != 0:
            raise SystemExit(f"{kind} {i}: exit {done.returncode}\n{done.stderr[-2000:]}")
        (slowed if kind == "slowed" else stores).append(out)
        if kind == "run":
            durations.append(time.monotonic() - started)
        print(f"{kind} {i + 1}: {time.monotonic() - started:.0f} s", flush=True)
    alarms: list[dict[str, object]] = []
    ratios: dict[str, list[float]] = {}
    pairs = list(itertools.permutations(range(args.runs), 2))
    exits: dict[int, int] = {}
    for a, b in pairs:
        target = root / f"cmp-{a}-{b}.json"
        done = dtbench("compare", str(stores[a]), str(stores[b]), "--threshold",
                       args.threshold, "--json", str(target))
        exits[done.returncode] = exits.get(done.returncode, 0) + 1
        rows = json.loads(target.read_text()).get("rows", []) if target.exists() else []
        for row in rows:
            if isinstance(row.get("ratio"), (int, float)) and row.get("ci95") is not None:
                key = f"{row.get('workload')} {row.get('metric')}"
                ratios.setdefault(key, []).append(float(row["ratio"]))
        if done.returncode == 1:
            alarms.append({"baseline": a, "candidate": b,
                           "line": done.stdout.strip().splitlines()[0]})
    print(f"\nmachine: {cpu()}; each run: dtbench run {args.run_args}")
    print(f"ordered pairs compared: {len(pairs)}; exit codes: {dict(sorted(exits.items()))}")
    rate = len(alarms) / len(pairs)
    print(f"false alarms (exit 1 on the same commit): {len(alarms)}/{len(pairs)} = {rate:.1%}")
    for alarm in alarms[:10]:
        print(f"  run {alarm['baseline']} -> run {alarm['candidate']}: {alarm['line']}")
    print("\nrun-to-run ratio of each metric over the pairs (min / median / max):")
    for key, values in sorted(ratios.items()):
        values.sort()
        print(f"  {key:40s} {values[0]:.3f} / {values[len(values) // 2]:.3f} / "
              f"{values[-1]:.3f}")
    precision = report_precision(stores, durations)
    caught, injected = power(root, stores, slowed, args.threshold)
    gate = history_gate(root, stores, slowed, args.threshold)
    if slowed:
        print(f"\nslowed runs (--straggler 0:{args.factor:g}): throughput ratio slowed/normal "
              f"per workload: {', '.join(f'{k} {v:.3f}' for k, v in sorted(injected.items()))}")
        print(f"slowdowns caught (exit 1): {caught}/{len(slowed)}")
    if args.json_file:
        Path(args.json_file).write_text(json.dumps({
            "machine": cpu(), "run_args": args.run_args, "runs": args.runs,
            "pairs": len(pairs), "exit_codes": exits, "false_alarms": len(alarms),
            "rate": rate, "alarms": alarms,
            "ratios": {k: [min(v), max(v)] for k, v in ratios.items()},
            "slowed": len(slowed), "factor": args.factor, "caught": caught,
            "injected": injected, "precision": precision, "run_seconds": durations,
            "history_gate": gate},
            indent=1) + "\n")


HISTORY_FIRST = 5  # runs in the history before the first candidate


def history_store(root: Path, stores: list[Path], name: str) -> Path:
    """The normal runs' records as a CI's store would hold them: each run a commit of main on
    one machine (commits as the records would carry them; the code is the same)."""
    folder = root / name
    shutil.rmtree(folder, ignore_errors=True)  # an earlier invocation's (--reuse)
    folder.mkdir()
    for i, store in enumerate(stores):
        for record in records_in(store):
            record["code"] = {**(record.get("code") or {}), "commit": f"{i:040x}",
                              "branch": "main", "dirty": False}
            (folder / f"{record['run_id']}.json").write_text(json.dumps(record))
    return folder


def history_gate(root: Path, stores: list[Path], slowed: list[Path], threshold: str
                 ) -> dict[str, Any]:
    """The gate as CI uses it with a store: run i compared with `--baseline-branch main` over
    the runs before it (from the HISTORY_FIRST-th on): an exit 1 is a false alarm; each
    slowed run compared over all normal runs: an exit 1 is a slowdown caught."""
    alarms, caught, lines = 0, 0, []
    candidates = list(range(HISTORY_FIRST, len(stores)))
    for i in candidates:
        base = history_store(root, stores[:i], f"history-{i:02d}")
        done = dtbench("compare", str(base), str(stores[i]), "--baseline-branch", "main",
                       "--threshold", threshold)
        alarms += done.returncode == 1
        if done.returncode == 1:
            lines.append(done.stdout.strip().splitlines()[0])
    # More same-commit candidates from the same runs: each against a history of the other
    # runs (runs are exchangeable when nothing changed; the baseline is then the latest other).
    others_alarms = 0
    for i in range(len(stores)):
        base = history_store(root, stores[:i] + stores[i + 1:], "history-others")
        done = dtbench("compare", str(base), str(stores[i]), "--baseline-branch", "main",
                       "--threshold", threshold)
        others_alarms += done.returncode == 1
        if done.returncode == 1:
            lines.append(f"(run {i} against the others) " + done.stdout.strip().splitlines()[0])
    full = history_store(root, stores, "history-all") if slowed else None
    for out in slowed:
        done = dtbench("compare", str(full), str(out), "--baseline-branch", "main",
                       "--threshold", threshold, "--match-on", MATCH_WITHOUT_STRAGGLER)
        caught += done.returncode == 1
    print(f"\nwith the machine's history (compare STORE RUN --baseline-branch main): false "
          f"alarms {alarms}/{len(candidates)}, slowdowns caught {caught}/{len(slowed)}; each run "
          f"against the other runs' history: false alarms {others_alarms}/{len(stores)}")
    for line in lines[:5]:
        print(f"  {line}")
    return {"candidates": len(candidates), "false_alarms": alarms, "slowed": len(slowed),
            "caught": caught, "alarm_lines": lines, "against_the_others": len(stores),
            "false_alarms_against_the_others": others_alarms}


def report_precision(stores: list[Path], durations: list[float]) -> dict[str, dict[str, Any]]:
    """Each workload's achieved interval over the normal runs (as their records state it),
    how many met their target, the steps they measured; and the runs' wall time."""
    found: dict[str, list[dict[str, Any]]] = {}
    for store in stores:
        for record in records_in(store):
            account = (record.get("notes") or {}).get("measurement") or {}
            found.setdefault(record["spec"]["workload"], []).append(account)
    if durations:
        print(f"\nwall time of a run (s): min {min(durations):.0f}, median "
              f"{sorted(durations)[len(durations) // 2]:.0f}, max {max(durations):.0f}")
    print("achieved 95% interval of throughput per workload (min / median / max), runs that "
          "met the target, steps measured (median):")
    out = {}
    for workload, accounts in sorted(found.items()):
        achieved = sorted(a["achieved_ci_pct"] for a in accounts
                          if isinstance(a.get("achieved_ci_pct"), (int, float)))
        steps = sorted(a.get("measured_steps") or 0 for a in accounts)
        met = sum(a.get("target_met") is True for a in accounts)
        if achieved:
            print(f"  {workload:10s} +/-{achieved[0]:.2f}% / {achieved[len(achieved) // 2]:.2f}% "
                  f"/ {achieved[-1]:.2f}%   met {met}/{len(accounts)}   steps "
                  f"{steps[len(steps) // 2]}")
        out[workload] = {"achieved_ci_pct": achieved, "met": met, "runs": len(accounts),
                         "steps": steps}
    return out


def power(root: Path, stores: list[Path], slowed: list[Path], threshold: str
          ) -> tuple[int, dict[str, float]]:
    """How many slowed runs compare flags against a normal one, and the throughput ratio
    injected per workload (median over the pairs). The straggler is part of the spec's key,
    so these comparisons match on the experiment's fields without it."""
    caught, injected = 0, {}
    for i, out in enumerate(slowed):
        target = root / f"power-{i}.json"
        done = dtbench("compare", str(stores[i % len(stores)]), str(out), "--threshold",
                       threshold, "--match-on", MATCH_WITHOUT_STRAGGLER, "--json", str(target))
        caught += done.returncode == 1
        for row in json.loads(target.read_text()).get("rows", []) if target.exists() else []:
            if row.get("metric") == "throughput" and isinstance(row.get("ratio"), float):
                injected.setdefault(str(row.get("workload")), []).append(row["ratio"])
    return caught, {k: sorted(v)[len(v) // 2] for k, v in injected.items()}


if __name__ == "__main__":
    main()
