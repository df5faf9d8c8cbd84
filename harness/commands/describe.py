"""`dtbench describe WORKLOAD`: the preset's parameters, FLOPs, input and quality target."""
from __future__ import annotations

import argparse

from harness.commands.arguments import print_json
from harness.core.errors import EXIT_OK
from harness.core.spec import SIZES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workload")
    parser.add_argument("--size", default="full", choices=SIZES)
    parser.add_argument("--json", action="store_true")


def command(args: argparse.Namespace) -> int:
    from workloads import get_workload

    info = get_workload(args.workload).describe(args.size)
    if args.json:
        print_json(info)
        return EXIT_OK
    target = info["target"]
    comparison = ">=" if target["higher_is_better"] else "<="
    print(f"{info['workload']} ({info['size']}): {info['summary']}")
    print(f"  parameters        {info['parameters']:,}")
    print(f"  flops_per_sample  {info['flops_per_sample']:,} ({info['flops_per_sample'] / 1e9:.4g}"
          " GFLOP, forward+backward)")
    print(f"  input shape       {tuple(info['input_shape'])}, {info['num_classes']} classes")
    print(f"  default batch     {info['default_batch_size']}")
    print(f"  data (ttt)        {info['data']}")
    print(f"  quality target    {target['metric']} {comparison} {target['value']} "
          f"within {target['max_epochs']} epochs")
    if info["notes"]:
        print(f"  notes             {info['notes']}")
    return EXIT_OK
