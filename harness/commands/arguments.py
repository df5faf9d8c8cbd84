"""The argument parser class, its help layout and the value types shared by every
subcommand."""
from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import Any, NoReturn

from harness.core.errors import UsageError
from harness.core.fields import int_list as int_list
from harness.core.fields import non_negative_int as non_negative_int
from harness.core.fields import positive_int as positive_int
from harness.core.files import check_output_file
from harness.core.secrets import mask

HELP_WIDTH = 100


class ParseError(UsageError):
    """A refused command line, with the program it was refused by ("dtbench data make"):
    the CLI prints it once, as `prog: error: message`."""

    def __init__(self, message: str, prog: str) -> None:
        super().__init__(message)
        self.prog = prog


class HelpFormatter(argparse.HelpFormatter):
    """argparse's layout, at most HELP_WIDTH columns, with each option's default appended
    where it has one worth showing and its help does not already say it in words."""

    def __init__(self, prog: str, **kwargs: Any) -> None:
        kwargs.setdefault("width", min(HELP_WIDTH, shutil.get_terminal_size().columns - 2))
        kwargs.setdefault("max_help_position", 30)
        super().__init__(prog, **kwargs)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        shown = shown_default(action)
        if shown is None or "default" in text.lower():
            return text
        return f"{text} (default: {shown.replace('%', '%%')})"


def shown_default(action: argparse.Action) -> str | None:
    """The default as --help prints it; None where there is nothing to show (no default,
    False, an empty list, a flag that only switches something on or off)."""
    default = action.default
    if (default is None or default is False or default is argparse.SUPPRESS
            or isinstance(action, argparse._StoreConstAction | argparse._HelpAction
                          | argparse._VersionAction)
            or (isinstance(default, list | tuple) and not default)):
        return None
    if isinstance(default, list | tuple):
        return ",".join(str(item) for item in default)
    return str(default)


class Parser(argparse.ArgumentParser):
    """argparse whose errors are one line on stderr and exit 2, never a usage dump; options
    must be spelled out (an abbreviation such as `--out` for `--output` is an error); help
    shows defaults (HelpFormatter)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        """argparse's own messages quote the value they refuse ("invalid choice: 'URL'"):
        any password in it is masked here."""
        raise ParseError(mask(message), self.prog)


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
