"""`dtbench sysinfo`: the machine and software fingerprint that every record carries."""
from __future__ import annotations

import argparse
import json

from harness.commands.options import add_json_option, json_replaces_text
from harness.core.errors import EXIT_OK


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_json_option(parser, "the fingerprint", bare_is_stdout=True)


def command(args: argparse.Namespace) -> int:
    from backends import COMPUTE_BACKENDS
    from harness.machine.fingerprint import harness_info, machine_info, software_info

    backends = {}
    for name in COMPUTE_BACKENDS:
        cls = COMPUTE_BACKENDS.get(name)
        availability = cls.availability()
        backends[name] = {"available": availability.available, "reason": availability.reason,
                          **(cls().info() if availability.available else {})}
    data = {"harness": harness_info(), "machine": machine_info(), "software": software_info(),
            "backends": backends}
    if json_replaces_text(args, data):
        return EXIT_OK
    for section, values in data.items():
        print(f"{section}:")
        for key, value in values.items():
            shown = json.dumps(value, default=str) if isinstance(value, dict | list) else value
            print(f"  {key:<14} {shown}")
    return EXIT_OK
