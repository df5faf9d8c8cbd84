"""The command line's conventions, declared once: the parser every command gets (errors on one
line, exit 2; help that shows each option's default), the value types, and the options several
commands take: where the output goes (`--out STORE`, `--json FILE`, `-q`), how ranks start (the
launch group), CPU threads, and the records a reading command takes. Each shared option is an
argparse argument group, so every command's `--help` shows it under the same heading with the
same words; a second hand-written copy is where they drift apart.

`--json FILE` means one thing everywhere: write the command's JSON to FILE; `--json -` writes
it to stdout, and whatever the command prints as text goes to stderr meanwhile (`json_owns_
stdout`), so stdout stays one JSON document a pipe can read."""
from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn, TextIO

from harness.core.errors import UsageError, did_you_mean
from harness.core.files import check_output_file
from harness.core.outputs import JSON_STDOUT as STDOUT
from harness.core.outputs import json_output
from harness.core.outputs import write_json as write_json
from harness.core.secrets import mask
from harness.spec.fields import add_options, declared_fields
from harness.spec.fields import int_list as int_list
from harness.spec.fields import non_negative_int as non_negative_int
from harness.spec.fields import positive_int as positive_int
from harness.spec.specs import LaunchOptions
from harness.store.targets import STORE_DIR, STORE_VAR, default_store
from harness.store.url import is_store_url

HELP_WIDTH = 100
# the namespace attribute by which the innermost parser that left words over names itself
UNRECOGNIZED = "_dtbench_unrecognized"
# The dests of the shared groups: a command whose other options come from a field table
# (`run`) leaves these out of it and takes them from here.
OUTPUT_DESTS = ("out", "json_file", "quiet")
LAUNCH_DESTS = tuple(f.name for f in declared_fields(LaunchOptions))
RECORD_PATHS_HELP = ("record files, --json lists, stores (directories or postgresql:// URLs) "
                     "or pytest-benchmark JSON")
Container = argparse.ArgumentParser | argparse._ArgumentGroup


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
    """argparse whose errors are one line on stderr and exit 2, never a usage dump, prefixed
    with the command they belong to (`dtbench list: error: unrecognized arguments`); a
    misspelt choice or option is answered with the nearest valid spelling; options must be
    spelled out (an abbreviation such as `--out` for `--output` is an error); help shows
    defaults (HelpFormatter)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        """argparse's own messages quote the value they refuse ("invalid choice: 'URL'"):
        any password in it is masked here."""
        raise ParseError(mask(message), self.prog)

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None
                         ) -> tuple[argparse.Namespace, list[str]]:
        """argparse's, with a bare `--json` read as `--json -` where the command kept that
        older spelling; the innermost parser with words it does not know names them, so the
        error is its command's (a subcommand's leftovers reach the top parser too)."""
        words = self._bare_json(list(sys.argv[1:] if args is None else args))
        namespace, extras = super().parse_known_args(words, namespace)
        if extras and not hasattr(namespace, UNRECOGNIZED):
            setattr(namespace, UNRECOGNIZED, (self.prog, " ".join(map(self._named, extras))))
        return namespace, extras

    def parse_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                   namespace: argparse.Namespace | None = None) -> argparse.Namespace:
        namespace, extras = self.parse_known_args(args, namespace)
        prog, words = vars(namespace).pop(UNRECOGNIZED, (self.prog, " ".join(extras)))
        if extras:
            raise ParseError(mask(f"unrecognized arguments: {words}"), prog)
        return namespace

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        """argparse's check of a choice, naming the nearest choice where one is close (`dtbench
        reprot`: did you mean report?) and the whole list where none is."""
        if action.choices is None or value in action.choices:
            return
        names = [str(choice) for choice in action.choices]
        close = did_you_mean(str(value), names)
        hint = f"; did you mean {close}?" if close else f" (choose from {', '.join(names)})"
        raise argparse.ArgumentError(action, f"invalid choice: {value!r}{hint}")

    def _named(self, word: str) -> str:
        """A word no option of this parser takes, with the nearest option where it looks like
        a misspelt one (`--verison (did you mean --version?)`)."""
        options = [option for option in self._option_string_actions if option.startswith("--")]
        close = did_you_mean(word.split("=", 1)[0], options) if word.startswith("--") else None
        return f"{word} (did you mean {close}?)" if close else word

    def _bare_json(self, words: list[str]) -> list[str]:
        """`--json` with no FILE after it, where the command took that older spelling (JSON on
        stdout): `--json -`, with a note that names the spelling replacing it."""
        action = self._option_string_actions.get("--json")
        if not (isinstance(action, JsonOption) and action.bare_is_stdout):
            return words
        found = [i for i, word in enumerate(words) if word == "--json" and (
            i + 1 == len(words) or words[i + 1].startswith("-") and words[i + 1] != STDOUT)]
        for i in reversed(found):
            print(f"{self.prog}: note: a bare --json is deprecated; write --json - (JSON on "
                  "stdout) or --json FILE", file=sys.stderr)
            words.insert(i + 1, STDOUT)
        return words


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


class JsonOption(argparse.Action):
    """`--json FILE` (`-` for stdout); with `bare_is_stdout`, the older bare `--json` still
    works where it did: Parser reads it as `--json -`, with a note on stderr that names the
    spelling that replaces it. `bare_is_stdout` never makes FILE optional (`--json [FILE]`)."""

    def __init__(self, option_strings: Sequence[str], dest: str,
                 bare_is_stdout: bool = False, **kwargs: Any) -> None:
        self.bare_is_stdout = bare_is_stdout
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)


class RenamedOption(argparse.Action):
    """An older spelling that still works: it sets the new option's dest, with a note on
    stderr that names the new spelling (`renamed_to`)."""

    def __init__(self, option_strings: Sequence[str], dest: str, renamed_to: str = "",
                 **kwargs: Any) -> None:
        self.renamed_to = renamed_to
        kwargs.setdefault("help", f"the older spelling of {renamed_to} (deprecated; default: "
                          f"as for {renamed_to})")
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        print(f"{parser.prog}: note: {option_string} is deprecated; write {self.renamed_to}",
              file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_json_option(container: Container, what: str, *, bare_is_stdout: bool = False,
                    dest: str = "json_file") -> None:
    """`--json FILE`: `what` names what the JSON holds ("the records")."""
    container.add_argument("--json", dest=dest, metavar="FILE", action=JsonOption,
                           bare_is_stdout=bare_is_stdout,
                           help=f"write {what} as JSON to FILE; - for stdout (default: none, "
                           "no JSON)")


def add_output_file(container: Container, what: str, suffixes: Iterable[str], *,
                    metavar: str = "FILE", default: str = "stdout") -> None:
    """-o/--output FILE: always a file the command writes (a store is --out), in the format
    its suffix names; a suffix the command cannot write is exit 2 naming those it can, never
    a file whose name says another format than it holds."""
    allowed = tuple(suffixes)

    def output_file(text: str) -> str:
        suffix = Path(text).suffix.lower()
        if suffix not in allowed:
            raise argparse.ArgumentTypeError(
                f"{text}: cannot write {suffix or 'a file without a suffix'}; name a "
                f"{', '.join(allowed)} file")
        return text

    container.add_argument("-o", "--output", type=output_file, metavar=metavar,
                           help=f"write {what} to FILE, in the format its suffix names: "
                           f"{', '.join(allowed)} (default: {default})")


def add_store_option(container: Container) -> None:
    """--out STORE: always the store records go to (a file a command writes is -o/--output);
    without it the user's own store (`default_store`), never a checkout's results/."""
    container.add_argument("--out", default=default_store(), metavar="STORE",
                           help="the store the records go to: a directory or a "
                           f"postgresql://USER@HOST:PORT/DB URL (default: ${STORE_VAR} if "
                           f"set, else ./{STORE_DIR})")


def add_output_options(parser: argparse.ArgumentParser, what: str = "the records", *,
                       quiet: bool = True, title: str = "output",
                       json_dest: str = "json_file") -> argparse._ArgumentGroup:
    """The output group of a command that stores records: --out, --json and -q. The store is
    the user's own unless --out names another (`default_store`): never a checkout's results/."""
    group = parser.add_argument_group(title)
    add_store_option(group)
    add_json_option(group, what, dest=json_dest)
    if quiet:
        group.add_argument("-q", "--quiet", action="store_true", help="no progress display")
    return group


def add_launch_options(parser: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """Where a multi-node run's ranks meet and how long they may be silent: the options of
    `run` and `comm` that say how ranks start, not what is measured. They are LaunchOptions'
    declared fields (harness/spec/specs.py): flag, help and default written there once."""
    group = parser.add_argument_group("launch")
    add_options(group, declared_fields(LaunchOptions))
    return group


def add_backend_option(container: Container, *, auto: bool = True, default: str = "auto",
                       what: str = "the compute backend") -> None:
    """-b/--backend: a compute backend of the registry (backends/), or auto, the best one
    available here."""
    from backends import COMPUTE_BACKENDS

    names = (*COMPUTE_BACKENDS, "auto") if auto else tuple(COMPUTE_BACKENDS)
    container.add_argument("-b", "--backend", default=default, choices=names,
                           help=what + ("; auto: the best available here" if auto else ""))


def add_threads_option(container: Container, *, per_rank: bool) -> None:
    """--threads: per rank for commands that start ranks (default 1), else of the one process
    (default 0: every usable core)."""
    if per_rank:
        container.add_argument("--threads", type=positive_int, metavar="N",
                               help="CPU threads per rank (default 1)")
    else:
        container.add_argument("--threads", type=non_negative_int, default=0, metavar="N",
                               help="CPU threads (default 0: every usable core)")


def add_record_paths(parser: argparse.ArgumentParser, *, metavar: str = "PATH") -> None:
    """The records a reading command takes: record files, --json lists and stores; none given,
    the store `dtbench run` writes (`default_store`)."""
    parser.add_argument("paths", nargs="*", default=[default_store()], metavar=metavar,
                        help=f"{RECORD_PATHS_HELP} (default: the store dtbench run writes, "
                        f"${STORE_VAR} if set, else ./{STORE_DIR})")


def check_default_store(paths: Sequence[str]) -> None:
    """A reading command given no PATH reads the default store: where there is none yet, say
    where `dtbench run` writes instead of "no such file"."""
    if list(paths) == [default_store()] and not is_store_url(paths[0]) \
            and not Path(paths[0]).exists():
        raise UsageError(f"no records in {paths[0]}, the store dtbench run writes (${STORE_VAR} "
                         "names another): run dtbench run, or give a PATH")


def regroup(parser: argparse.ArgumentParser, title: str, dests: Sequence[str]) -> None:
    """Show options already declared (by a field table such as `run`'s) under `title` in
    --help; parsing is unchanged, only the heading they are listed under."""
    group = next((g for g in parser._action_groups if g.title == title), None) \
        or parser.add_argument_group(title)
    for action in parser._actions:
        if action.dest in dests:
            for container in parser._action_groups:
                if action in container._group_actions:
                    container._group_actions.remove(action)
            group._group_actions.append(action)


@contextmanager
def json_owns_stdout(args: argparse.Namespace) -> Iterator[None]:
    """With `--json -` the JSON is stdout's: the command's text goes to stderr while it runs,
    and `json_target` hands the real stdout to the JSON writer."""
    if getattr(args, "json_file", None) != STDOUT:
        yield
        return
    args.json_stdout = sys.stdout
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        sys.stdout = args.json_stdout


def json_target(args: argparse.Namespace, store_root: Path | None = None
                ) -> Path | TextIO | None:
    """Where --json writes, checked before any work: None without --json, stdout for `-`, else
    a file whose directory exists (or is the store `store_root` about to be created)."""
    given = getattr(args, "json_file", None)
    if given is not None and given != STDOUT and store_root is not None:
        return check_json_target(given, store_root)
    return json_output(given, getattr(args, "json_stdout", None))


def json_replaces_text(args: argparse.Namespace, data: Any) -> bool:
    """For a command whose JSON is its text in another form (list, describe, sysinfo, peak):
    write `data` to the --json target; True where that was stdout, so no text follows."""
    write_json(json_target(args), data, default=str)
    return getattr(args, "json_file", None) == STDOUT
