"""The argument parser class and value types shared by every subcommand."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, NoReturn

from harness.core.errors import UsageError
from harness.core.fields import int_list as int_list
from harness.core.fields import non_negative_int as non_negative_int
from harness.core.fields import positive_int as positive_int
from harness.core.files import check_output_file
from harness.core.secrets import mask


class Parser(argparse.ArgumentParser):
    """argparse whose errors are one line on stderr and exit 2, never a usage dump; options
    must be spelled out (an abbreviation such as `--out` for `--output` is an error)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        """argparse's own messages quote the value they refuse ("invalid choice: 'URL'"):
        any password in it is masked here."""
        raise UsageError(mask(f"{self.prog}: {message}"))


def percentage(text: str) -> float:
    try:
        value = float(text.rstrip("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a percentage such as 5, got {text!r}") from None
    if not 0 < value < 100:
        raise argparse.ArgumentTypeError(f"expected a percentage above 0 and below 100, "
                                         f"got {text!r}")
    return value


def check_json_target(path: str, store_root: Path) -> Path:
    """The --json file's directory must exist, or be the store that is about to be created."""
    target = Path(path)
    if target.parent.resolve() == store_root.resolve() and not store_root.exists():
        if target.is_dir():
            raise UsageError(f"--json {path}: is a directory; name a file")
        return target
    return check_output_file(path, "--json")


def print_json(data: Any) -> None:
    import json

    print(json.dumps(data, indent=2, default=str))
