"""A bare, hand-written training loop: the reference the harness's overhead is measured against.

Run as a script: prints one JSON line with the per-step times. It imports only the model
definitions from dtbench, nothing of the harness.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--malloc-tuning", action="store_true",
                        help="apply the same glibc allocator settings as dtbench's cpu backend")
    args = parser.parse_args()
    if args.malloc_tuning:
        from backends.cpu import tune_allocator

        tune_allocator()

    from workloads.resnet50.model import ResNet50

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = ResNet50().to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-5)
    images = torch.randn(args.batch_size, 3, 224, 224).contiguous(
        memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (args.batch_size,))
    dtype = torch.bfloat16 if args.precision == "bf16" else None
    times = []
    for step in range(args.warmup + args.steps):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            loss = F.cross_entropy(model(images).float(), labels)
        loss.backward()
        optimizer.step()
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
    print(json.dumps({"step_times": times,
                      "throughput": args.batch_size / statistics.median(times)}))


if __name__ == "__main__":
    main()
