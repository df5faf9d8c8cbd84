"""How the quick suite's figures change now that a one-rank `--comm none` run goes through
the supervisor and a rank process of its own, against running it in the command's process as
dtbench did before (the four workloads one after another in one process).

Each round runs both ways, the order alternating round by round, so drift on a shared
machine hits both alike: "in-process" is one fresh Python process that trains the quick
suite's four specs in turn with the rank loop itself (what the runner used to do), "rank
process" is `Runner.run` for the same specs (preflight, launch, collect, record, store).
Prints, per workload, the medians over rounds of throughput and peak memory both ways and
their ratio. Asserts nothing (a benchmark).

    python benchmarks/bench_execution_path.py --rounds 3
    python benchmarks/bench_execution_path.py --rounds 2 --steps 10 -w hep_cnn -w lstm
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.spec.specs import RunSpec  # noqa: E402


def quick_specs(workloads: list[str], steps: int | None) -> list[RunSpec]:
    from harness.run.plan import plan_runs
    from harness.run.suites import load_suite

    cli: dict[str, Any] = {"workload": workloads, "steps": steps, "threads": 0}
    return [spec for spec, _ in plan_runs(load_suite("quick"), cli)]


def in_process(specs: list[RunSpec]) -> list[dict[str, float]]:
    """The old path, in a fresh process: every spec trained in that one process in turn."""
    code = ("import json, statistics, sys\n"
            "from harness.spec.kinds import spec_of\n"
            "from harness.rank.loops import run_throughput\n"
            "for line in sys.stdin:\n"
            "    r = run_throughput(spec_of(json.loads(line)))\n"
            "    print(json.dumps({'step_s': statistics.median(r.step_times),"
            " 'peak_memory': r.peak_memory}), flush=True)\n")
    feed = "".join(json.dumps(spec.as_dict()) + "\n" for spec in specs)
    out = subprocess.run([sys.executable, "-c", code], input=feed, text=True, check=True,
                         capture_output=True, cwd=ROOT).stdout
    rows = [json.loads(line) for line in out.strip().splitlines()]
    return [{"throughput": spec.batch_per_rank / row["step_s"],
             "peak_memory": float(row["peak_memory"])} for spec, row in zip(specs, rows,
                                                                           strict=True)]


def rank_process(specs: list[RunSpec], store_dir: Path) -> list[dict[str, float]]:
    """The one path every run takes now: Runner.run, whose ranks are processes of their own."""
    from harness.records.record import metric
    from harness.run.runner import Runner
    from harness.store.directory import Store

    runner = Runner(Store(store_dir))
    figures = []
    for spec in specs:
        outcome = runner.run(spec)
        assert outcome is not None and outcome.status == "success", outcome
        figures.append({name: float(metric(outcome.record, name)["value"])
                        for name in ("throughput", "peak_memory")})
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=None, help="default: the suite's")
    parser.add_argument("-w", "--workload", action="append", default=None)
    args = parser.parse_args()
    specs = quick_specs(args.workload or ["alexnet", "resnet50", "hep_cnn", "lstm"], args.steps)
    seen: dict[str, dict[str, list[float]]] = {
        spec.workload: {"old_tp": [], "new_tp": [], "old_mem": [], "new_mem": []}
        for spec in specs}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            order = ("old", "new") if round_ % 2 == 0 else ("new", "old")
            for way in order:
                figures = in_process(specs) if way == "old" else \
                    rank_process(specs, Path(tmp) / f"store{round_}")
                for spec, fig in zip(specs, figures, strict=True):
                    seen[spec.workload][f"{way}_tp"].append(fig["throughput"])
                    seen[spec.workload][f"{way}_mem"].append(fig["peak_memory"])
                print(f"round {round_ + 1}/{args.rounds} {way}: " + ", ".join(
                    f"{s.workload} {f['throughput']:.1f}/s {f['peak_memory'] / 2**30:.2f} GiB"
                    for s, f in zip(specs, figures, strict=True)), flush=True)
    print(f"\n{'workload':10} {'in-process /s':>14} {'rank proc /s':>13} {'ratio':>6} "
          f"{'in-proc GiB':>11} {'rank GiB':>9} {'ratio':>6}")
    for name, fig in seen.items():
        old_tp, new_tp = statistics.median(fig["old_tp"]), statistics.median(fig["new_tp"])
        old_mem, new_mem = statistics.median(fig["old_mem"]), statistics.median(fig["new_mem"])
        print(f"{name:10} {old_tp:14.2f} {new_tp:13.2f} {new_tp / old_tp:6.3f} "
              f"{old_mem / 2**30:11.2f} {new_mem / 2**30:9.2f} {new_mem / old_mem:6.3f}")


if __name__ == "__main__":
    main()
