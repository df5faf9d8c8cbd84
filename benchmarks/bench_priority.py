"""Priority-ordered pulls on a capped link: a ps-sync worker and its server in two network
namespaces joined by a veth pair capped by `tc tbf`, with `priority` off and on, interleaved;
prints each setting's median step time, the time from a step's fetch to its first layer's
forward (`phase_forward_start`: the next step's start) and the time the forward waited for
later pieces (`phase_pull_wait`).

    python benchmarks/bench_priority.py                        # alexnet tiny, 100mbit
    python benchmarks/bench_priority.py -w alexnet --rate 1gbit --steps 20 --rounds 3

Needs root, iproute2 and tc (tests/distributed/netns.py). The worker is node 0 (namespace a),
the server node 1 (namespace b), started by torchrun over gloo, one thread each. The peak
cache is a seeded fake (MFU is meaningless here; the step times are not). Prints figures,
asserts nothing; the machine's other load shows in the records' `load`.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.distributed.netns import netns_pair, two_nodes  # noqa: E402

DTBENCH = [sys.executable, "-m", "harness"]


def seeded_cache(folder: Path) -> Path:
    """A peak cache with a fake cpu/fp32 peak at one thread: no run spends time on GEMMs."""
    import torch

    from backends.cpu import CPUBackend
    from harness.microbench import peak

    os.environ["DTBENCH_CACHE_DIR"] = str(folder)
    peak.store_peak(peak.PeakResult(
        backend="cpu", device_name=CPUBackend().device_name(torch.device("cpu")),
        precision="fp32", threads=1, flops=1e11, memory_bandwidth=1e10,
        per_size={"1024": 1e11}, measured_at="2024-01-01T00:00:00+00:00",
        torch=torch.__version__))
    return folder


def metric(record: dict, name: str) -> float | None:
    return next((m.get("value") for m in record["metrics"] if m["name"] == name), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-w", "--workload", default="alexnet")
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--rate", default="100mbit", help="tc tbf rate, each direction")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-priority-"))
    cache = seeded_cache(work / "cache")
    found: dict[str, list[dict[str, float | None]]] = {"false": [], "true": []}
    with netns_pair(rate=args.rate) as pair:
        env = {k: v for k, v in os.environ.items()
               if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
        env.update(DTBENCH_CACHE_DIR=str(cache), GLOO_SOCKET_IFNAME=pair.ifname,
                   PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT),
                                                            env.get("PYTHONPATH")])))
        for round_ in range(args.rounds):
            for priority in ("false", "true"):
                out = work / f"{round_}-{priority}"
                out.mkdir()
                argv = [*DTBENCH, "run", "-w", args.workload, "--size", args.size,
                        "--batch-size", str(args.batch_size), "--steps", str(args.steps),
                        "--warmup", "2", "--threads", "1", "--strategy", "ps-sync",
                        "--strategy-opt", f"priority={priority}", "--launcher", "torchrun",
                        "--comm", "gloo", "--nnodes", "2", "-n", "1", "--master-addr",
                        pair.addr_a, "--master-port", "29517", "--rank-timeout", "120", "-q"]
                node0, node1 = two_nodes(pair, argv, env, out / "a", out / "b", work, 900,
                                         ("--json", str(out / "a.json")))
                if node0.returncode != 0:
                    raise SystemExit(f"node 0 failed: {node0.stdout[-2000:]}"
                                     f"{node0.stderr[-2000:]}\nnode 1: {node1.stdout[-2000:]}")
                (record,) = json.loads((out / "a.json").read_text())
                if record["status"] != "success":
                    raise SystemExit(f"{record['status']}: {record['error']}")
                row = {name: metric(record, name) for name in
                       ("step_time", "phase_forward_start", "phase_pull_wait", "phase_wait",
                        "phase_forward")}
                found[priority].append(row)
                print(f"  round {round_ + 1} priority={priority:5s} " + " ".join(
                    f"{k}={v * 1e3:.1f}ms" for k, v in row.items() if v is not None),
                    flush=True)
    print(f"\n{args.workload} {args.size}, batch {args.batch_size}, ps-sync: 1 worker and 1 "
          f"server across a veth capped at {args.rate}; medians over {args.rounds} round(s) "
          f"of {args.steps} steps")
    print("| priority | step ms | fetch to first forward ms | forward waiting for pieces ms |")
    print("|---|---:|---:|---:|")
    for priority, rows in found.items():
        def median(name: str, rows: list = rows) -> str:
            values = [r[name] for r in rows if r[name] is not None]
            return f"{statistics.median(values) * 1e3:.1f}" if values else "-"
        print(f"| {'on' if priority == 'true' else 'off'} | {median('step_time')} | "
              f"{median('phase_forward_start')} | {median('phase_pull_wait')} |")


if __name__ == "__main__":
    main()
