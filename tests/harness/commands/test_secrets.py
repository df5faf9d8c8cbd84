"""No password in any output: a store URL holding one, passed to every subcommand in every
positional and every option that takes a value (as `--opt URL` and `--opt=URL`), all of them
at once, before the subcommand and as a mistyped subcommand. Neither stdout, stderr, nor any
file or folder a command leaves behind shows it.

Commands that would start real work (runs, collectives, kernels, a peak measurement) get a
last argument that stops them before any: the URL's own handling (argparse's messages, the
store's, libpq's) still runs first. The URLs point at a closed port of 127.0.0.1, so every
connection fails at once; tests/harness/store/test_pgstore_hostile.py does the same against
a live server, with pages and reports written.
"""
from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.commands.cli import build_parser, main

PASSWORD = "Zq7-secret-Pw"
URLS = (f"postgresql://dtbench:{PASSWORD}@127.0.0.1:1/bench",
        f"postgresql://dtbench:a@{PASSWORD}@127.0.0.1:1/bench",  # an unencoded @ in it
        f"postgres://dtbench@127.0.0.1:1/bench?password={PASSWORD}&sslmode=disable")
# The last word of a command line that would otherwise start measuring: a bad choice or name
# that the command reports before any work.
STOPS = {"run": ["-w", "no_such_workload"], "comm": ["--op", "no_such_op"],
         "kernels": ["--set", "no_such_set"], "peak": ["--precision", "no_such"],
         "data": ["-w", "no_such_workload"], "doctor": ["--backend", "no_such"]}


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(found[0].choices) if found else {}


def _takes_value(action: argparse.Action) -> bool:
    return action.nargs != 0 and not isinstance(action, argparse._SubParsersAction)


def _lines(prefix: list[str], parser: argparse.ArgumentParser, url: str
           ) -> Iterator[list[str]]:
    nested = _subparsers(parser)
    if nested:
        for name, child in nested.items():
            yield from _lines([*prefix, name], child, url)
        return
    stop = STOPS.get(prefix[0], [])
    positional = [url for a in parser._actions if not a.option_strings and _takes_value(a)]
    options = [a for a in parser._actions if a.option_strings and _takes_value(a)]
    required = [word for a in options if a.required for word in (a.option_strings[-1], url)]
    base = [*prefix, *positional, *required]
    yield [*base, *stop]
    for action in options:
        flag = action.option_strings[-1]
        yield [*base, flag, url, *stop]
        if flag.startswith("--"):
            yield [*base, f"{flag}={url}", *stop]
    yield [*prefix, *positional, *(w for a in options for w in (a.option_strings[-1], url)),
           *stop]


def command_lines(url: str) -> list[list[str]]:
    """Every command line the test tries with `url`."""
    lines = [[url], ["--store", url, "report"], ["report", "--store", url],
             ["--version", url]]
    for name, parser in _subparsers(build_parser()).items():
        lines += list(_lines([name], parser, url))
    return lines


def test_every_subcommand_and_option_is_tried() -> None:
    lines = command_lines(URLS[0])
    tried = {line[0] for line in lines}
    assert set(_subparsers(build_parser())) <= tried
    assert len(lines) > 150
    assert ["predict", URLS[0], "--calibrate-from", URLS[0]] in lines
    assert ["history", URLS[0], f"--json={URLS[0]}"] in lines


@pytest.mark.timeout(600)
@pytest.mark.parametrize("url", URLS, ids=["user part", "unencoded @", "parameter"])
def test_no_output_shows_the_password(url: str, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DTBENCH_PENDING", str(tmp_path / "pending"))
    leaks = []
    for line in command_lines(url):
        try:
            main(line)
        except SystemExit:  # --help and --version print and exit, as argparse does
            pass
        captured = capsys.readouterr()
        if PASSWORD in captured.out + captured.err:
            leaks.append((line, (captured.out + captured.err)[-300:]))
    assert leaks == []
    left = [str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")]
    assert not [name for name in left if PASSWORD in name]
    assert not [p for p in tmp_path.rglob("*")
                if p.is_file() and PASSWORD in p.read_text(errors="replace")]
