"""Strategy rankings, measured: ddp, fsdp, zero1, ps-sync and pipeline side by side at 2 and 4
ranks, on one node and across two network-namespace hosts joined by a capped veth, every cell
run R times in fresh processes, round by round, with the calibration `dtbench predict
--validate` reads (single-rank runs repeated R times: the between-run spread of the
intervals; fsdp's and zero1's own work at one rank; `dtbench comm` sweeps of each world size
and link). Then the validation itself: predicted against measured step time with each row's
90% interval and the coverage, and the predicted order of every pair of strategies in a cell
against the measured order wherever the measured difference exceeds the between-run spread.

    python benchmarks/bench_ranking.py --plan                 # the commands, the time
    python benchmarks/bench_ranking.py STORE                   # measure, then validate
    python benchmarks/bench_ranking.py STORE --no-two-hosts    # one node only
    python benchmarks/bench_ranking.py STORE --validate-only   # read STORE again

The two-host part needs root, iproute2 and tc (tests/distributed/netns.py): one rank (2
ranks) or two ranks (4 ranks) a namespace, torchrun + gloo, the veth capped by `tc tbf` at
--rate each way. Every run measures --steps steps after --warmup (30 steps: enough for the
step-time spread that prices the slowest rank's wait). Prints the commands as it runs them
and the validation's figures; asserts nothing. The store is the lead's to publish.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DTBENCH = [sys.executable, "-m", "harness"]
STRATEGIES = ("ddp", "fsdp", "zero1", "ps-sync", "pipeline")
RANKS = (2, 4)
OPS = "allreduce,allgather,reducescatter,broadcast"
SECONDS_A_RUN = 25  # start-up, warm-up and 30 steps of hep_cnn small on 2 cores (estimate)
SECONDS_A_SWEEP = 60  # a comm sweep of four collectives, 1 KB to 32 MB


def one_node(store: str, args: argparse.Namespace) -> list[list[str]]:
    """The one-node dtbench commands: the cells, then their calibration."""
    run = ["run", "-w", args.workload, "--size", args.size, "--threads", "1", "--steps",
           str(args.steps), "--warmup", str(args.warmup), "--repeat", str(args.repeat),
           "--out", store, "-q"]
    cells = [*run, "-n", ",".join(map(str, RANKS)), "--comm", "gloo",
             *[a for s in STRATEGIES for a in ("--strategy", s)]]
    comm = ["comm", "--comm", "gloo", "--op", OPS, "--sizes", "1K:32M", "--out", store, "-q"]
    return [cells,
            [*run, "-n", "1"],  # compute: the plain single-rank run, R times
            [*run, "-n", "1", "--comm", "gloo", "--strategy", "fsdp", "--strategy", "zero1"],
            *[[*comm, "-n", str(n)] for n in RANKS]]


def two_host_jobs(args: argparse.Namespace) -> list[list[str]]:
    """The commands each of two hosts runs (one per rank count, strategy and round, then the
    comm sweeps), without --node-rank, --out and --master-port (two_nodes adds them)."""
    common = ["--launcher", "torchrun", "--comm", "gloo", "--nnodes", "2", "--threads", "1",
              "--rank-timeout", "180", "-q"]
    jobs = []
    for _ in range(args.repeat):  # round by round: every strategy meets the machine alike
        for ranks in RANKS:
            for strategy in STRATEGIES:
                jobs.append(["run", "-w", args.workload, "--size", args.size, "-n",
                             str(ranks // 2), "--strategy", strategy, "--steps",
                             str(args.steps), "--warmup", str(args.warmup), *common])
    for ranks in RANKS:
        jobs.append(["comm", "--op", OPS, "--sizes", "1K:8M", "--iters", "10", "-n",
                     str(ranks // 2), *common])
    return jobs


def two_hosts(store: str, args: argparse.Namespace) -> None:
    """Every two-host job across the namespaces, the link capped at args.rate."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_predict import over_two_hosts

    over_two_hosts(store, [(args.rate, words) for words in two_host_jobs(args)], 29700)


def plan(args: argparse.Namespace) -> None:
    """The commands and how long they should take."""
    runs = len(RANKS) * len(STRATEGIES) * args.repeat + 3 * args.repeat
    sweeps = len(RANKS)
    print("one node:")
    for words in one_node("STORE", args):
        print("  dtbench " + " ".join(words))
    remote = len(RANKS) * len(STRATEGIES) * args.repeat
    print(f"two hosts ({args.rate}): {remote} runs and {len(RANKS)} comm sweeps, e.g.")
    print("  dtbench " + " ".join(two_host_jobs(args)[0]))
    minutes = ((runs + remote) * SECONDS_A_RUN + 2 * sweeps * SECONDS_A_SWEEP) / 60
    print(f"{runs + remote} runs and {2 * sweeps} sweeps: about {minutes:.0f} minutes on 2 "
          f"cores (~{SECONDS_A_RUN} s a run, ~{SECONDS_A_SWEEP} s a sweep)")
    print("then: dtbench predict --validate STORE")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", nargs="?", help="where the records go (and are read from)")
    parser.add_argument("-w", "--workload", default="hep_cnn")
    parser.add_argument("--size", default="small")
    parser.add_argument("--repeat", type=int, default=3, help="fresh runs a cell (>= 3)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rate", default="200mbit", help="tc tbf cap of the veth, each way")
    parser.add_argument("--no-two-hosts", action="store_true")
    parser.add_argument("--validate-only", action="store_true")
    parser.add_argument("--plan", action="store_true", help="print the commands and the time")
    args = parser.parse_args()
    if args.repeat < 3:
        parser.error("--repeat: at least 3 fresh runs a cell (the between-run spread)")
    if args.plan:
        plan(args)
        return 0
    if not args.store:
        parser.error("give STORE (or --plan)")
    if not args.validate_only:
        for words in one_node(args.store, args):
            print("$ dtbench " + " ".join(words), flush=True)
            subprocess.run([*DTBENCH, *words], cwd=ROOT, check=False)
        if not args.no_two_hosts:
            two_hosts(args.store, args)
    command = [*DTBENCH, "predict", "--validate", args.store]
    print("$ dtbench " + " ".join(command[2:]), flush=True)
    code = subprocess.run(command, cwd=ROOT, check=False).returncode
    print_pairs(args.store)
    return code


def print_pairs(store: str) -> None:
    """The table of every pair of strategies measured in one cell of the store."""
    from harness.core.text import render_table
    from harness.predict.inputs import load_calibration
    from harness.predict.ranking import PAIR_HEADER, pair_cells
    from harness.predict.validate import ranked_pairs, validate

    warnings: list[str] = []
    records = load_calibration((store,), warnings)
    print("\n" + render_table(PAIR_HEADER, pair_cells(ranked_pairs(validate(records, records)))))


if __name__ == "__main__":
    sys.exit(main())
