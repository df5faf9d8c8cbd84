"""gpt under `dtbench run` against a bare hand-written training loop of the same model: tokens/s
and MFU side by side (issue 45's benchmark, as bench_overhead.py is ResNet-50's).

Both train gpt (small by default: 6 layers, width 384, 256 tokens) at the same batch,
precision and threads with AdamW, on one fixed batch of random tokens, in fresh processes,
interleaved round by round so that drift on a shared machine hits all alike. The cpu backend
tunes glibc's allocator, so each side runs with and without that tuning: dtbench/bare at
equal settings is the harness's own overhead (the goal: at least 0.99). Each round first
measures the GEMM peak afresh, and every variant's MFU is taken against it (counted FLOPs per
token, workloads/flops.py). Prints figures; asserts nothing (a benchmark).

    python benchmarks/bench_gpt.py --rounds 3 --steps 10
    python benchmarks/bench_gpt.py --size tiny --rounds 1 --steps 2 --warmup 1   # a check
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_overhead import fresh_peak  # noqa: E402  (one peak probe)


def bare_loop(args: argparse.Namespace) -> None:
    """The bare loop itself (run in its own process): only the model definition and its
    preset's sizes come from dtbench, nothing of the harness. Prints one JSON line."""
    import torch
    import torch.nn.functional as F

    if args.malloc_tuning:
        from backends.cpu import tune_allocator

        tune_allocator()
    from workloads.gpt import PRESETS
    from workloads.gpt.model import GPT

    preset = PRESETS[args.size]
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = GPT(**preset.model_kwargs)
    optimizer = torch.optim.AdamW(model.parameters(), lr=preset.lr, betas=(0.9, 0.95),
                                  weight_decay=0.1)
    context, vocab = preset.input_shape[0], preset.num_classes
    tokens = torch.randint(0, vocab, (args.batch_size, context + 1))
    inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    dtype = torch.bfloat16 if args.precision == "bf16" else None
    times = []
    for step in range(args.warmup + args.steps):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype is not None):
            logits = model(inputs)
        loss = F.cross_entropy(logits.float().reshape(-1, vocab), targets.reshape(-1))
        loss.backward()
        optimizer.step()
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
    print(json.dumps({"step_times": times,
                      "throughput": args.batch_size / statistics.median(times)}))


def bare(args: argparse.Namespace, tuned: bool) -> float:
    out = subprocess.run(
        [sys.executable, __file__, "--bare", "--size", args.size, "--batch-size",
         str(args.batch_size), "--steps", str(args.steps), "--warmup", str(args.warmup),
         "--threads", str(args.threads), "--precision", args.precision,
         *(["--malloc-tuning"] if tuned else [])],
        check=True, capture_output=True, text=True).stdout
    return float(json.loads(out.strip().splitlines()[-1])["throughput"])


def harness(args: argparse.Namespace, tuned: bool, cache: Path) -> float:
    env = {**os.environ, "DTBENCH_MALLOC_TUNING": "1" if tuned else "0",
           "DTBENCH_CACHE_DIR": str(cache)}
    with tempfile.TemporaryDirectory() as tmp:
        records = Path(tmp) / "records.json"
        subprocess.run(
            [sys.executable, "-m", "harness", "run", "-w", "gpt", "--size", args.size,
             "--batch-size", str(args.batch_size), "--precision", args.precision,
             "--steps", str(args.steps), "--warmup", str(args.warmup), "--peak", "cached",
             "--threads", str(args.threads), "--out", tmp, "--json", str(records), "-q"],
            check=True, capture_output=True, text=True, cwd=ROOT, env=env)
        record = json.loads(records.read_text())[0]
        if record["status"] != "success":
            raise SystemExit(f"harness run {record['status']}: {record['error']}")
        return next(m["value"] for m in record["metrics"] if m["name"] == "throughput")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=("tiny", "small", "full"), default="small")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--malloc-tuning", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.bare:
        bare_loop(args)
        return
    from workloads import get_workload
    from workloads.flops import count_flops_per_sample

    workload = get_workload("gpt")
    tokens = workload.tokens_per_sample(args.size) or 1
    flops_per_sample = float(count_flops_per_sample(workload, args.size))
    peaks: list[float] = []
    results: dict[str, list[float]] = {}
    mfus: dict[str, list[float]] = {}
    for round_index in range(args.rounds):
        with tempfile.TemporaryDirectory() as folder:
            cache = Path(folder)
            peaks.append(fresh_peak(args, cache))
            print(f"round {round_index + 1}  GEMM peak measured now "
                  f"{peaks[-1] / 1e9:8.1f} GFLOP/s", flush=True)
            variants = {
                "bare (plain)": lambda: bare(args, tuned=False),
                "dtbench (DTBENCH_MALLOC_TUNING=0)": lambda c=cache: harness(args, False, c),
                "bare (+allocator tuning)": lambda: bare(args, tuned=True),
                "dtbench (default)": lambda c=cache: harness(args, True, c),
            }
            for name, measure in variants.items():
                value = measure()
                results.setdefault(name, []).append(value)
                mfus.setdefault(name, []).append(value * flops_per_sample / peaks[-1])
                print(f"round {round_index + 1}  {name:34s} {value * tokens:10.1f} tokens/s  "
                      f"MFU {mfus[name][-1]:.3f}", flush=True)
    median = {name: statistics.median(values) for name, values in results.items()}
    print(f"\ngpt {args.size}, batch {args.batch_size} x {tokens} tokens, {args.precision}, "
          f"{args.threads} threads, {args.steps} measured steps, {args.rounds} rounds (median "
          "over rounds):")
    for name, value in median.items():
        print(f"  {name:34s} {value * tokens:10.1f} tokens/s  MFU median "
              f"{statistics.median(mfus[name]):.3f} (rounds {min(mfus[name]):.3f}-"
              f"{max(mfus[name]):.3f})")
    print(f"GEMM peak over rounds: {min(peaks) / 1e9:.1f}-{max(peaks) / 1e9:.1f} GFLOP/s")
    plain = median["dtbench (DTBENCH_MALLOC_TUNING=0)"] / median["bare (plain)"]
    tuned = median["dtbench (default)"] / median["bare (+allocator tuning)"]
    print("dtbench/bare at equal allocator settings (goal: >= 0.99):")
    print(f"  plain malloc : {plain:.3f}")
    print(f"  tuned malloc : {tuned:.3f}")


if __name__ == "__main__":
    main()
