"""Whether a VM's speed moves within one process, and whether a probe timed beside each step
moves with it (issue 55: what a gate could divide out).

    python benchmarks/bench_speed_drift.py                      # resnet50 small, 200 steps
    python benchmarks/bench_speed_drift.py --workload lstm --steps 300 --window 10
    python benchmarks/bench_speed_drift.py --workload hep_cnn --busy 0.05   # probe after busy

One process trains WORKLOAD on one synthetic batch; after each step it times the speed probe
of --speed-probe (harness/rank/measure.SpeedProbe: a fixed matrix product) and a memory copy
of 32 MB. Per window of --window steps it prints the medians; then, over the windows, the
coefficient of variation of the step, of each probe and of step / probe, and the correlation
of the step with each probe. A step steady within the process (a window's CV near its
in-process interval) would say the spread between invocations is a process's own (placement,
memory layout); a step that moves from window to window says the machine's speed moves in
time, and a probe that correlates with it can be divided out. With --busy F every other
window's steps compute F x their time more (as `--straggler-work busy`), and the probe after
those is compared with the probe after plain steps: a probe that a step's end changes would
bias a slowdown read on its clock. Prints figures, asserts nothing; run it alone on the
machine.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.rank.measure import SpeedProbe  # noqa: E402
from harness.strategies.clock import straggle  # noqa: E402
from workloads import get_workload  # noqa: E402

COPY_ELEMENTS = 8_000_000  # 32 MB of fp32: past the caches of the VMs seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="resnet50",
                        help="the workload to train (default resnet50)")
    parser.add_argument("--size", default="small", help="its preset (default small)")
    parser.add_argument("--batch", type=int, default=0,
                        help="samples a step (default: the preset's for the CPU)")
    parser.add_argument("--steps", type=int, default=200,
                        help="measured steps (default 200)")
    parser.add_argument("--window", type=int, default=10,
                        help="steps a window (default 10)")
    parser.add_argument("--busy", type=float, default=0.0, metavar="F",
                        help="every other window, each step computes F x its time more after "
                        "the backward pass, as --straggler-work busy does; the probe after "
                        "those steps is printed apart (default 0: none)")
    args = parser.parse_args()
    workload = get_workload(args.workload)
    batch = args.batch or workload.preset(args.size).default_batch("cpu")
    model = workload.build_model(args.size)
    optimizer = workload.optimizer(model, args.size)
    inputs, targets = workload.synthetic_batch(args.size, batch, "cpu")
    probe = SpeedProbe(torch.device("cpu"))
    source = torch.ones(COPY_ELEMENTS)
    target = torch.empty_like(source)

    def step(busy: float = 0.0) -> None:
        started = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        workload.loss(model(inputs), targets).backward()
        straggle(busy * (time.perf_counter() - started), "busy", torch.device("cpu"))
        optimizer.step()

    for _ in range(3):
        step()
    steps, gemms, copies = [], [], []
    for index in range(args.steps):
        started = time.perf_counter()
        step(args.busy if (index // args.window) % 2 else 0.0)
        steps.append(time.perf_counter() - started)
        gemms.append(probe.time())
        started = time.perf_counter()
        target.copy_(source)
        copies.append(time.perf_counter() - started)

    def windows(values: list[float]) -> list[float]:
        return [statistics.median(values[i:i + args.window])
                for i in range(0, len(values) - args.window + 1, args.window)]

    def cv(values: list[float]) -> float:
        return statistics.stdev(values) / statistics.fmean(values) * 100.0

    step_w, gemm_w, copy_w = windows(steps), windows(gemms), windows(copies)
    print(f"{args.workload} {args.size}, batch {batch}, {torch.get_num_threads()} threads, "
          f"{args.steps} steps in windows of {args.window}")
    print("step ms   " + " ".join(f"{v * 1e3:.0f}" for v in step_w))
    print("probe ms  " + " ".join(f"{v * 1e3:.1f}" for v in gemm_w))
    print("copy ms   " + " ".join(f"{v * 1e3:.1f}" for v in copy_w))
    per_probe = [s / g for s, g in zip(step_w, gemm_w, strict=True)]
    per_copy = [s / c for s, c in zip(step_w, copy_w, strict=True)]
    print(f"CV over windows: step {cv(step_w):.1f}%, probe {cv(gemm_w):.1f}%, copy "
          f"{cv(copy_w):.1f}%, step/probe {cv(per_probe):.1f}%, step/copy {cv(per_copy):.1f}%")
    print(f"correlation over windows: step~probe {np.corrcoef(step_w, gemm_w)[0, 1]:.2f}, "
          f"step~copy {np.corrcoef(step_w, copy_w)[0, 1]:.2f}")
    print(f"probe share of a step: {statistics.median(gemms) / statistics.median(steps):.1%}")
    if args.busy:
        plain = [g for i, g in enumerate(gemms) if not (i // args.window) % 2]
        busy = [g for i, g in enumerate(gemms) if (i // args.window) % 2]
        print(f"probe after plain steps {statistics.median(plain) * 1e3:.3f} ms, after busy "
              f"steps {statistics.median(busy) * 1e3:.3f} ms "
              f"({statistics.median(busy) / statistics.median(plain) - 1:+.1%})")


if __name__ == "__main__":
    main()
