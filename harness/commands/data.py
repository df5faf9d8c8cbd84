"""`dtbench data make` writes a dataset of a workload's shape in a file format;
`dtbench data bench` measures the input pipeline alone (samples/s against loader workers),
like a microbenchmark, cold and warm where the page cache can be dropped.

    dtbench data make resnet50 --size small --format imagefolder --samples 2000 -o DIR
    dtbench data bench resnet50 --size small --data DIR [--workers 0,1,2] [--batches N]
"""
from __future__ import annotations

import argparse
import subprocess
import time
from pathlib import Path
from typing import Any

from harness.commands.options import Parser, add_json_option, json_target, positive_int, write_json
from harness.core.errors import EXIT_OK, UsageError
from harness.spec.fields import count_list
from harness.spec.specs import SIZES

DROP_CACHES = Path("/proc/sys/vm/drop_caches")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from workloads import WORKLOADS
    from workloads.files import FORMATS

    actions = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=Parser,
                                    help="what to do (ACTION -h for its options)")
    actions.required = True
    make_help = "write a dataset of a workload's shape in a file format"
    make = actions.add_parser("make", help=make_help, description=f"dtbench data make: "
                              f"{make_help}.")
    _add_workload(make, WORKLOADS.names())
    make.add_argument("--format", required=True, choices=FORMATS, help="the file format")
    make.add_argument("--samples", type=positive_int, required=True, metavar="N",
                      help="samples to write")
    make.add_argument("--seed", type=int, default=0, help="seed of the generated samples")
    make.add_argument("-o", "--output", required=True, metavar="DIR",
                      help="a new folder (written beside it and moved into place)")
    bench_help = "the input pipeline alone: samples/s by loader workers"
    bench = actions.add_parser("bench", help=bench_help, description=f"dtbench data bench: "
                               f"{bench_help}, cold and warm where the page cache can be "
                               "dropped.")
    _add_workload(bench, WORKLOADS.names())
    bench.add_argument("--data", required=True, metavar="PATH",
                       help="the dataset: a folder or file dtbench data make wrote")
    bench.add_argument("--workers", type=count_list, default=[0, 1, 2], metavar="LIST",
                       help="loader worker counts to measure, a comma list")
    bench.add_argument("--batch-size", type=positive_int, metavar="N",
                       help="default: the preset's")
    bench.add_argument("--batches", type=positive_int, default=20, metavar="N",
                       help="batches timed per setting (after the first, which starts workers)")
    add_json_option(bench, "the figures")


def _add_workload(parser: argparse.ArgumentParser, names: list[str]) -> None:
    """WORKLOAD, as describe and predict take it; -w/--workload, the older spelling, too."""
    parser.add_argument("workload", nargs="?", help=f"the workload: {', '.join(names)} (default: "
                        "none; name one, here or with -w)")
    parser.add_argument("-w", "--workload", dest="workload_option", metavar="WORKLOAD",
                        help="the same as WORKLOAD (default: none)")
    parser.add_argument("--size", default="small", choices=SIZES, help="workload preset")


def _workload_name(args: argparse.Namespace) -> str:
    given = [name for name in (args.workload, args.workload_option) if name]
    if not given:
        raise UsageError(f"data {args.action}: name a WORKLOAD (dtbench list names them)")
    if len(set(given)) > 1:
        raise UsageError(f"data {args.action}: two workloads given, {given[0]} and {given[1]}")
    return given[0]


def command(args: argparse.Namespace) -> int:
    from workloads import get_workload

    workload = get_workload(_workload_name(args))
    if args.action == "make":
        from workloads.files import workload_shape
        from workloads.files.make import make_dataset

        shape, classes, tokens = workload_shape(workload, args.size)
        if tokens != (args.format == "tokens"):
            raise UsageError(f"--format {args.format}: {workload.name} reads "
                             f"{'tokens' if tokens else 'images or arrays'}")
        started = time.perf_counter()
        text = workload.token_ids(args.size) if tokens else None
        made = make_dataset(args.format, args.output, samples=args.samples, shape=shape,
                            num_classes=classes, seed=args.seed, text_ids=text)
        size, count = float(made["bytes"]), int(made["samples"])  # type: ignore[arg-type]
        print(f"{args.output}: {count} {workload.name}/{args.size} samples as {made['format']}, "
              f"{size / 1e6:.1f} MB ({size / count / 1e3:.1f} kB a sample), {made['classes']} "
              f"classes, {made['content']}, {time.perf_counter() - started:.1f} s")
        return EXIT_OK
    return bench(args, workload)


def drop_page_cache() -> str | None:
    """Empty the page cache (root, Linux); None when done, else why not."""
    try:
        subprocess.run(["sync"], check=False, timeout=60)
        DROP_CACHES.write_text("3\n")
    except OSError as exc:
        return f"cannot drop the page cache ({exc.strerror or exc})"
    return None


def _rate(workload: Any, args: argparse.Namespace, workers: int, batch: int) -> dict[str, Any]:
    from workloads.files import LoaderOptions, file_batches

    fmt, feed = file_batches(workload, args.size, args.data, batch, (0, 1),
                             LoaderOptions(workers=workers))
    batches = feed.forever()
    started = time.perf_counter()
    next(batches)  # starts the workers and fills their prefetch
    first = time.perf_counter() - started
    started, samples = time.perf_counter(), 0
    for _ in range(args.batches):
        inputs, _, _ = next(batches)
        samples += len(inputs)
    elapsed = time.perf_counter() - started
    return {"format": fmt, "workers": workers, "batch": batch, "samples": samples,
            "seconds": elapsed, "samples_per_s": samples / elapsed, "first_batch_s": first}


def bench(args: argparse.Namespace, workload: Any) -> int:
    from harness.core.text import render_table

    json_file = json_target(args)
    batch = args.batch_size or workload.preset(args.size).default_batch("cpu")
    rows = []
    for workers in args.workers:
        if workers < 0:
            raise UsageError(f"--workers {workers}: not a worker count")
        why_not = drop_page_cache()
        cold = _rate(workload, args, workers, batch)
        cold["cache"] = why_not or "cold"
        rows.append(cold)
        if why_not is None:
            rows.append({**_rate(workload, args, workers, batch), "cache": "warm"})
        else:
            cold["cache"] = f"warm ({why_not})"
    print(f"{workload.name}/{args.size} input pipeline alone, {args.data} ({rows[0]['format']}), "
          f"batch {batch}, {args.batches} batches a setting")
    print(render_table(("workers", "page cache", "samples/s", "first batch s"),
                       [[str(r["workers"]), r["cache"], f"{r['samples_per_s']:.1f}",
                         f"{r['first_batch_s']:.2f}"] for r in rows]))
    write_json(json_file, {"workload": workload.name, "size": args.size, "data": args.data,
                           "rows": rows})
    return EXIT_OK
