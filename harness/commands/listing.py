"""`dtbench list`: what can run here, and why not where it cannot."""
from __future__ import annotations

import argparse
from typing import Any

from harness.commands.options import add_json_option, json_replaces_text
from harness.core.errors import EXIT_OK


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_json_option(parser, "the lists", bare_is_stdout=True)


def _entries(registry: Any) -> list[dict[str, Any]]:
    out = []
    for name in registry:
        availability = registry.get(name).availability()
        out.append({"name": name, "available": availability.available,
                    "reason": availability.reason})
    return out


def _option(option: Any) -> dict[str, Any]:
    """An option as its strategy class declares it (predict and run both resolve it there)."""
    entry = {"default": option.default, "help": option.help, "type": option.kind.__name__}
    if option.aliases:
        entry["aliases"] = list(option.aliases)
    if option.choices is not None:
        entry["choices"] = list(option.choices)
    if option.minimum is not None:
        entry["minimum"] = option.minimum
    if option.assumption:
        entry["predict_only"] = option.assumption
    return entry


def command(args: argparse.Namespace) -> int:
    from backends import COMM_BACKENDS, COMPUTE_BACKENDS, LAUNCHERS
    from harness.collectors import COLLECTORS
    from harness.run.suites import builtin_names, load_suite
    from harness.strategies import STRATEGIES
    from workloads import WORKLOADS

    data = {
        "workloads": [{"name": n, "summary": WORKLOADS.get(n).summary,
                       "sizes": list(WORKLOADS.get(n).presets)} for n in WORKLOADS],
        "backends": [{**e, "precisions": list(COMPUTE_BACKENDS.get(e["name"]).precisions)}
                     for e in _entries(COMPUTE_BACKENDS)],
        "comm": _entries(COMM_BACKENDS),
        "launchers": _entries(LAUNCHERS),
        "strategies": [{"name": n, "family": STRATEGIES.get(n).family,
                        "summary": STRATEGIES.get(n).summary,
                        "engine": STRATEGIES.get(n).engine,
                        "options": {o.name: _option(o) for o in STRATEGIES.get(n).options}}
                       for n in STRATEGIES],
        "suites": [{"name": n, "description": load_suite(n).description}
                   for n in builtin_names()],
        "collectors": COLLECTORS.names(),
    }
    if json_replaces_text(args, data):
        return EXIT_OK
    print("workloads:")
    for w in data["workloads"]:
        print(f"  {w['name']:<10} {w['summary']}  [sizes: {', '.join(w['sizes'])}]")
    for section in ("backends", "comm", "launchers"):
        print(f"{section}:")
        for e in data[section]:
            state = "available" if e["available"] else f"unavailable: {e['reason']}"
            print(f"  {e['name']:<10} {state}")
    print("strategies:")
    for s in data["strategies"]:
        options = ", ".join(f"{k}={v['default']}" + (" (predict only)" if "predict_only" in v
                                                      else "")
                            for k, v in s["options"].items())
        print(f"  {s['name']:<10} {s['family']}: {s['summary']}"
              + (f"  [options: {options}]" if options else ""))
    print("suites:")
    for s in data["suites"]:
        print(f"  {s['name']:<10} {s['description']}")
    print(f"collectors: {', '.join(data['collectors'])}")
    return EXIT_OK
