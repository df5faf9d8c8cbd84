"""`dtbench describe WORKLOAD`: the preset's parameters, FLOPs, input and quality target;
with --layers, per layer parameters, activations, FLOPs and data or model parallelism."""
from __future__ import annotations

import argparse
from typing import Any

from harness.commands.options import (
    RenamedOption,
    add_json_option,
    json_replaces_text,
    positive_int,
)
from harness.core.errors import EXIT_OK
from harness.spec.specs import SIZES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from workloads import WORKLOADS

    parser.add_argument("workload", help=f"the workload to describe: {', '.join(WORKLOADS)}, "
                        "or torchvision:NAME (any torchvision classification model)")
    parser.add_argument("--size", default="full", choices=SIZES, help="workload preset")
    add_json_option(parser, "the description", bare_is_stdout=True)
    parser.add_argument("--layers", action="store_true",
                        help="per layer: parameters, activations, FLOPs, parallelism")
    parser.add_argument("--batch-size", type=positive_int, metavar="N",
                        help="--layers: batch per node (default: the preset's; 32 for a "
                        "torchvision model)")
    parser.add_argument("--batch", dest="batch_size", type=positive_int, metavar="N",
                        action=RenamedOption, renamed_to="--batch-size")
    parser.add_argument("--nodes", type=positive_int, default=1, help="--layers: node count")


def command(args: argparse.Namespace) -> int:
    from workloads import get_workload
    from workloads.external import is_external

    if args.layers:
        return layers_command(args)
    if is_external(args.workload):
        return external_command(args)
    info = get_workload(args.workload).describe(args.size)
    if json_replaces_text(args, info):
        return EXIT_OK
    target = info["target"]
    comparison = ">=" if target["higher_is_better"] else "<="
    print(f"{info['workload']} ({info['size']}): {heading(info)}")
    print(f"  parameters        {info['parameters']:,}")
    print(f"  flops_per_sample  {info['flops_per_sample']:,} ({info['flops_per_sample'] / 1e9:.4g}"
          " GFLOP, forward+backward)")
    if "tokens_per_sample" in info:
        print(f"  tokens/sample     {info['tokens_per_sample']:,}, vocabulary "
              f"{info['num_classes']:,}")
    if "flops_per_token" in info:
        print(f"  flops_per_token   {info['flops_per_token']:,.0f} counted; 6N + 12·L·d·T = "
              f"{info['palm_flops_per_token']:,.0f} (PaLM, appendix B); counted/formula "
              f"{info['counted_over_palm']:.4f}")
    else:
        print(f"  input shape       {tuple(info['input_shape'])}, {info['num_classes']} "
              "classes")
    print(f"  default batch     {info['default_batch_size']}")
    print(f"  data (ttt)        {info['data']}")
    print(f"  quality target    {target['metric']} {comparison} {target['value']} "
          f"within {target['max_epochs']} epochs")
    if info["notes"]:
        print(f"  notes             {info['notes']}")
    print(f"  layers            dtbench describe {info['workload']} --size {info['size']} "
          "--layers")
    return EXIT_OK


def heading(info: dict[str, Any]) -> str:
    """The workload's one-line summary for the size shown: the summary names the full preset's
    input, so a smaller preset keeps the model's name and states its own input."""
    if info["size"] == "full":
        return str(info["summary"])
    model = str(info["summary"]).split(", ", 1)[0]
    if "tokens_per_sample" in info:
        return (f"{model}, vocabulary {info['num_classes']:,}, {info['tokens_per_sample']:,} "
                "tokens")
    shape = list(info["input_shape"])
    if len(shape) == 3:  # channels first, as the model reads it; the summary writes HxWxC
        shape = [*shape[1:], shape[0]]
    return f"{model}, {'x'.join(str(d) for d in shape)}, {info['num_classes']:,} classes"


def external_command(args: argparse.Namespace) -> int:
    """A torchvision model's facts: what `predict` reads (it trains nowhere in dtbench)."""
    from workloads.external import build, model_name
    from workloads.layers import layer_table

    name = model_name(args.workload)
    model, shape, classes = build(name)
    layers = layer_table(args.workload, args.size)
    info = {"workload": f"torchvision:{name}", "parameters": sum(p.numel() for p in
                                                                model.parameters()),
            "flops_per_sample": sum(layer.flops for layer in layers),
            "input_shape": list(shape), "num_classes": classes, "layers": len(layers),
            "notes": "facts for describe and predict only: dtbench trains its four seed "
                     "workloads"}
    if json_replaces_text(args, info):
        return EXIT_OK
    print(f"{info['workload']}: {info['notes']}")
    print(f"  parameters        {info['parameters']:,}")
    print(f"  flops_per_sample  {info['flops_per_sample']:,} "
          f"({info['flops_per_sample'] / 1e9:.4g} GFLOP, forward+backward)")
    print(f"  input shape       {tuple(shape)}, {classes} classes, {len(layers)} layers")
    return EXIT_OK


def layers_command(args: argparse.Namespace) -> int:
    """The layer table: what data parallelism moves (parameters) against what model
    parallelism moves (activations of the batch), per layer."""
    from harness.core.text import render_table
    from workloads import get_workload
    from workloads.external import is_external
    from workloads.layers import (
        FAR_MORE,
        choose_parallelism,
        gradient_to_activation_ratio,
        layer_table,
    )

    external = is_external(args.workload)
    workload = args.workload if external else get_workload(args.workload)
    batch = args.batch_size or (32 if external
                                else workload.preset(args.size).default_batch("cpu"))
    layers = [{**layer.as_dict(),
               "ratio": gradient_to_activation_ratio(layer, batch, args.nodes),
               "parallelism": choose_parallelism(layer, batch, args.nodes)}
              for layer in layer_table(workload, args.size)]
    if json_replaces_text(args, {"workload": getattr(workload, "name", workload),
                                 "size": args.size, "batch_per_node": batch,
                                 "nodes": args.nodes, "far_more": FAR_MORE, "layers": layers}):
        return EXIT_OK
    rows = [[row["name"], row["kind"], f"{row['parameters']:,}",
             f"{row['activation_elements']:,}", f"{row['flops'] / 1e6:,.1f}",
             f"{row['ratio']:.3g}", row["parallelism"]] for row in layers]
    rows.append(["total", "", f"{sum(r['parameters'] for r in layers):,}", "",
                 f"{sum(r['flops'] for r in layers) / 1e6:,.1f}", "", ""])
    print(f"{getattr(workload, 'name', workload)} ({args.size}), batch {batch} per node, "
          f"{args.nodes} node(s)")
    print(render_table(("layer", "type", "parameters", "activations/sample",
                        "MFLOP/sample", "P/(A·b·N)", "parallel"), rows))
    print(f"P/(A·b·N): gradient elements per activation element moved; model parallel where "
          f"it is >= {FAR_MORE:g} (gradients far outnumber activations), data parallel "
          "otherwise.")
    return EXIT_OK
