"""`dtbench peak`: measure the GEMM peak and copy bandwidth of a backend now."""
from __future__ import annotations

import argparse
import sys

from harness.commands.options import (
    STDOUT,
    add_backend_option,
    add_json_option,
    add_threads_option,
    json_target,
    write_json,
)
from harness.core.errors import EXIT_OK, UsageError
from harness.spec.specs import PRECISIONS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_backend_option(parser)
    parser.add_argument("--precision", default="fp32", choices=PRECISIONS,
                        help="the GEMMs' precision (fp32 on CUDA allows TF32)")
    add_threads_option(parser, per_rank=False)
    add_json_option(parser, "the measurement", bare_is_stdout=True)


def command(args: argparse.Namespace) -> int:
    from backends import COMPUTE_BACKENDS
    from harness.microbench.peak import measure_peak, store_peak
    from harness.run.plan import best_backend

    backend = best_backend() if args.backend == "auto" else args.backend
    cls = COMPUTE_BACKENDS.get(backend)
    if args.precision not in cls.precisions:
        raise UsageError(f"backend {backend} has no {args.precision}; choose from: "
                         f"{', '.join(cls.precisions)}")
    availability = cls.availability()
    if not availability.available:
        print(f"skipped: backend {backend}: {availability.reason}", file=sys.stderr)
        return EXIT_OK
    json_file = json_target(args)
    result = measure_peak(backend, args.precision, args.threads)
    best = store_peak(result)
    write_json(json_file, result.as_dict(), default=str)
    if args.json_file == STDOUT:
        return EXIT_OK
    print(f"{backend} {result.device_name} {args.precision}, {result.threads} threads")
    for size, flops in result.per_size.items():
        print(f"  {size:>12}: {flops / 1e9:8.1f} GFLOP/s (median)")
    if result.burst_flops is not None:
        print(f"  sustained  {result.flops / 1e9:8.1f} GFLOP/s over {result.sustained_s:.0f} s "
              f"(burst {result.burst_flops / 1e9:.1f})")
        print(f"  clocks     {clock_line(result.clocks)}")
    print(f"  peak now   {result.flops / 1e9:8.1f} GFLOP/s")
    print(f"  copy       {result.memory_bandwidth / 1e9:8.1f} GB/s")
    if best.flops > result.flops:
        print(f"  best so far {best.flops / 1e9:7.1f} GFLOP/s (measured {best.measured_at}; "
              "runs use the best)")
    return EXIT_OK


def clock_line(clocks: dict | None) -> str:
    """A device's clocks and what limits them, in one line."""
    if not clocks:
        return "not read"
    if "unavailable" in clocks:
        return f"unavailable: {clocks['unavailable']}"
    reasons = clocks.get("clock_reasons")
    return (f"SM {clocks.get('sm_clock_mhz')} of {clocks.get('max_sm_clock_mhz')} MHz, memory "
            f"{clocks.get('memory_clock_mhz')} MHz, {clocks.get('temperature_c')} °C, "
            f"{clocks.get('power_w')} W; limited by: "
            f"{', '.join(reasons) if reasons else 'nothing reported'}")
