"""The conventions every command follows, checked over all of them: each option has help and
shows its default, shared options are declared once (harness/commands/options.py), bare
`dtbench` lists the commands, an error has one prefix, and `--json -` writes to stdout exactly
what `--json FILE` writes to the file."""
from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.commands.cli import SUBCOMMANDS, build_parser, main
from harness.commands.options import JsonOption, shown_default
from tests.harness.report.report_records import training


def parsers() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every subcommand's parser, and those of subcommands under it (data make, store export)."""
    def walk(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
        yield parser.prog, parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    yield from walk(sub)

    top = build_parser()
    commands = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    for sub in commands.choices.values():
        yield from walk(sub)


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [action for action in parser._actions
            if not isinstance(action, argparse._HelpAction | argparse._SubParsersAction)]


ALL = list(parsers())


@pytest.mark.parametrize("prog, parser", ALL, ids=[prog for prog, _ in ALL])
def test_every_option_has_help_and_shows_its_default(prog: str,
                                                     parser: argparse.ArgumentParser) -> None:
    formatter = parser._get_formatter()
    for action in options(parser):
        name = "/".join(action.option_strings) or action.dest
        assert action.help and action.help != argparse.SUPPRESS, f"{prog} {name}: no help"
        shown = formatter._expand_help(action)
        default = shown_default(action)
        if default is not None:
            assert "default" in shown.lower(), f"{prog} {name}: default {default} not shown"
            if "default" not in action.help.lower():
                assert f"(default: {default})" in shown, f"{prog} {name}"
    assert parser.description and parser.description.startswith(prog), prog


def test_every_command_is_in_the_list() -> None:
    assert {prog.split()[1] for prog, _ in ALL} == set(SUBCOMMANDS)


def test_a_default_worth_nothing_is_not_shown() -> None:
    parser = argparse.ArgumentParser()
    for flag, kwargs in (("--a", {"default": None}), ("--b", {"action": "store_true"}),
                         ("--c", {"default": []}), ("--d", {"default": [0, 1]})):
        parser.add_argument(flag, help="x", **kwargs)
    shown = [shown_default(action) for action in parser._actions[1:]]
    assert shown == [None, None, None, "0,1"]


def test_shared_options_are_declared_once() -> None:
    """--out, --json, -q and the launch options read the same wherever a command takes them."""
    seen: dict[str, tuple[object, ...]] = {}
    for prog, parser in ALL:
        for action in options(parser):
            if "--json" in action.option_strings:
                assert isinstance(action, JsonOption) and action.metavar == "FILE", prog
                assert action.help.endswith("as JSON to FILE; - for stdout"), prog
                continue
            shared = {"--out", "-q", "--node-rank", "--master-addr", "--master-port",
                      "--hostfile", "--rank-timeout", "--comm-timeout"}
            for flag in shared & set(action.option_strings):
                declared = (action.help, action.default, action.type, action.metavar)
                assert seen.setdefault(flag, declared) == declared, f"{prog} {flag}"
    assert {"--out", "-q", "--rank-timeout"} <= set(seen)


def test_bare_dtbench_lists_the_commands_on_stderr_and_exits_2(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("usage: dtbench")
    listed = {line.split()[0] for line in captured.err.splitlines() if line.startswith("    ")}
    assert set(SUBCOMMANDS) <= listed


@pytest.mark.parametrize("arguments, prog", [
    (["describe", "lstm", "--size", "huge"], "dtbench describe"),
    (["describe", "vgg16"], "dtbench describe"),
    (["data", "make", "lstm", "--format", "csv", "--samples", "1", "-o", "x"],
     "dtbench data make"),
    (["frobnicate"], "dtbench"),
], ids=["argparse", "command", "nested", "top"])
def test_an_error_has_exactly_one_prefix(capsys: pytest.CaptureFixture[str],
                                         arguments: list[str], prog: str) -> None:
    assert main(arguments) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{prog}: error: ") and err.count("\n") == 1, err
    assert err.count("error:") == 1 and "error: dtbench " not in err, err


def test_a_bare_json_still_prints_json_with_a_note(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "--json"]) == 0
    captured = capsys.readouterr()
    assert "workloads" in json.loads(captured.out)
    assert "dtbench list: note: a bare --json is deprecated; write --json -" in captured.err


@pytest.fixture
def records(tmp_path: Path) -> tuple[str, str]:
    base, cand = tmp_path / "base.json", tmp_path / "cand.json"
    base.write_text(json.dumps([training("r-base")]))
    cand.write_text(json.dumps([training("r-cand", speed=1.01)]))
    return str(base), str(cand)


@pytest.mark.parametrize("command", [
    ["list"], ["describe", "lstm", "--size", "tiny"], ["compare", "{base}", "{cand}"],
    ["history", "{base}", "{cand}"]], ids=["list", "describe", "compare", "history"])
def test_json_to_stdout_is_what_json_to_a_file_holds(
        command: list[str], records: tuple[str, str], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """With `--json -` stdout is one JSON document (any text goes to stderr), the same one
    `--json FILE` writes."""
    words = [word.format(base=records[0], cand=records[1]) for word in command]
    target = tmp_path / "out.json"
    code = main([*words, "--json", str(target)])
    capsys.readouterr()
    assert main([*words, "--json", "-"]) == code
    captured = capsys.readouterr()
    assert json.loads(captured.out) == json.loads(target.read_text())


def test_no_message_carries_its_own_prefix() -> None:
    """The CLI prefixes `dtbench COMMAND: error:`; a message that starts with the program's
    name again reads doubled."""
    import re

    root = Path(__file__).resolve().parents[3] / "harness"
    doubled = [f"{path.relative_to(root)}: {match.group(0)}" for path in root.rglob("*.py")
               for match in re.finditer(r"UsageError\(f?\"dtbench [a-z]+:",
                                        path.read_text())]
    assert not doubled
