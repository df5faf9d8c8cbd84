"""The conventions every command follows, checked over all of them: each option has help and
states its default (or why it has none), shared options are declared once
(harness/commands/options.py), bare `dtbench` lists the commands, an error has one prefix,
`--json -` writes to stdout exactly what `--json FILE` writes to the file, `--out` is a store
and `-o` a file of a suffix the command writes, and a misspelt name is answered with the
nearest valid one (issue 51 item 6)."""
from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.commands.cli import SUBCOMMANDS, build_parser, main
from harness.commands.options import JsonOption, Parser, RenamedOption, shown_default
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
                assert "as JSON to FILE; - for stdout (default: " in action.help, prog
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
    (["list", "--format", "json"], "dtbench list"),
    (["data", "make", "lstm", "--format", "hdf5", "--samples", "1", "-o", "x", "--bogus"],
     "dtbench data make"),
], ids=["argparse", "command", "nested", "top", "unrecognized", "nested unrecognized"])
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


def takes_a_value(action: argparse.Action) -> bool:
    """An option followed by a value, or a positional that may be left out."""
    if action.option_strings:
        return action.nargs != 0 and not isinstance(action, argparse._VersionAction)
    return action.nargs in ("?", "*")


def silent_defaults(parser: argparse.ArgumentParser) -> list[str]:
    """The options of `parser` that take a value and whose help (as --help prints it, with
    the appended default) never says what happens without them; a required one has none."""
    formatter = parser._get_formatter()
    return ["/".join(action.option_strings) or action.dest for action in options(parser)
            if takes_a_value(action) and not action.required
            and "default" not in formatter._expand_help(action).lower()]


@pytest.mark.parametrize("prog, parser", ALL, ids=[prog for prog, _ in ALL])
def test_every_option_that_takes_a_value_states_its_default(
        prog: str, parser: argparse.ArgumentParser) -> None:
    assert silent_defaults(parser) == [], f"{prog}: say the default, or why there is none"


def test_the_walk_reaches_nested_parsers_and_finds_a_silent_default() -> None:
    assert {"dtbench data make", "dtbench data bench", "dtbench store export",
            "dtbench store import"} <= {prog for prog, _ in ALL}
    parser = Parser(prog="dtbench x")
    parser.add_argument("--said", metavar="N", help="a count (default: none, every one)")
    parser.add_argument("--shown", default=3, help="a count")
    parser.add_argument("--silent", metavar="N", help="a count")
    parser.add_argument("--needed", required=True, help="a count")
    parser.add_argument("--flag", action="store_true", help="a switch")
    assert silent_defaults(parser) == ["--silent"]


def test_json_takes_a_file_or_dash_everywhere_never_an_optional_file() -> None:
    for prog, parser in ALL:
        assert "--json [" not in parser.format_help(), prog
        for action in options(parser):
            if "--json" in action.option_strings:
                assert action.nargs is None, prog


def test_a_bare_json_works_only_where_it_did(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["describe", "lstm", "--size", "tiny", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["workload"] == "lstm"
    assert main(["history", "--json"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dtbench history: error: argument --json: expected one argument")


def test_out_is_a_store_and_output_a_file_everywhere() -> None:
    """--out names a store wherever it appears; -o/--output is a file whose suffix the command
    checks, a folder it writes (DIR), or an older spelling of another option."""
    outputs = []
    for prog, parser in ALL:
        for action in options(parser):
            if "--out" in action.option_strings:
                assert action.metavar == "STORE", prog
            if "-o" in action.option_strings:
                assert action.option_strings == ["-o", "--output"], prog
                checked = getattr(action.type, "__name__", "") == "output_file"
                assert checked or action.metavar == "DIR" or isinstance(action, RenamedOption), \
                    prog
                outputs.append((prog, checked))
    assert {prog for prog, checked in outputs if checked} == {
        "dtbench report", "dtbench history", "dtbench predict"}


@pytest.mark.parametrize("arguments", [
    ["report", "{base}", "-o", "{tmp}/out.pdf"],
    ["report", "{base}", "-o", "{tmp}/out"],
    ["report", "{base}", "--format", "csv", "-o", "{tmp}/out.md"],
    ["history", "{base}", "-o", "{tmp}/out.md"],
    ["predict", "lstm", "--network", "10GbE", "--compute-rate", "1e12", "-o", "{tmp}/out.pdf"],
], ids=["report pdf", "report no suffix", "report md as csv", "history md", "predict pdf"])
def test_an_output_suffix_dtbench_cannot_write_is_exit_2(
        arguments: list[str], records: tuple[str, str], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    words = [word.format(base=records[0], tmp=tmp_path) for word in arguments]
    assert main(words) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1, captured.err
    assert captured.err.startswith(f"dtbench {words[0]}: error: ")
    assert ".html" in captured.err or "--format csv" in captured.err
    assert not [path for path in tmp_path.iterdir() if path.name.startswith("out")]


@pytest.mark.parametrize("arguments, prog, nearest", [
    (["reprot"], "dtbench", "did you mean report?"),
    (["--verison"], "dtbench", "did you mean --version?"),
    (["report", "--formt", "md"], "dtbench report", "--formt (did you mean --format?)"),
    (["describe", "restnet50"], "dtbench describe", "(did you mean resnet50?)"),
    (["run", "quik"], "dtbench run", "(did you mean quick?)"),
    (["run", "-w", "lstm", "--strategy", "hogwid"], "dtbench run", "(did you mean hogwild?)"),
    (["run", "-w", "lstm", "--size", "tinny"], "dtbench run", "did you mean tiny?"),
    (["kernels", "--set", "tinny"], "dtbench kernels", "(did you mean tiny?)"),
], ids=["command", "top option", "option", "workload", "suite", "strategy", "choice",
        "kernel set"])
def test_a_misspelt_name_is_answered_with_the_nearest(
        arguments: list[str], prog: str, nearest: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(arguments) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{prog}: error: ") and err.count("\n") == 1, err
    assert nearest in err
    assert list(tmp_path.iterdir()) == []


def test_history_with_an_unknown_metric_names_the_metrics_it_has(
        records: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["history", *records, "--metric", "throughpt"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith("dtbench history: error: unknown metric 'throughpt' (did "
                                   "you mean throughput?); choose from: ")
    assert "step_time" in captured.err and "mfu" in captured.err
    # a metric the catalogue knows but no record holds: a history with nothing in it
    assert main(["history", *records, "--metric", "busbw"]) == 3


def test_older_spellings_still_work_with_a_note(capsys: pytest.CaptureFixture[str]) -> None:
    def parsed(*words: str) -> argparse.Namespace:
        return build_parser(words[0]).parse_args(list(words))

    assert parsed("describe", "lstm", "--batch", "8").batch_size == 8
    assert parsed("predict", "lstm", "--nodes", "1,4").ranks == [1, 4]
    assert parsed("predict", "lstm", "--ranks", "1,4").ranks == [1, 4]
    assert parsed("store", "export", "postgresql://u@h/d", "-o", "snap").out == "snap"
    err = capsys.readouterr().err
    for old, new in (("--batch", "--batch-size"), ("--nodes", "--ranks"), ("-o", "--out")):
        assert f"{old} is deprecated; write {new}" in err


def test_a_batch_is_batch_size_everywhere() -> None:
    """`describe --batch` was the one other spelling; it stays only as a deprecated alias."""
    spellings = {}
    for prog, parser in ALL:
        for action in options(parser):
            for flag in action.option_strings:
                if "batch" in flag and flag != "--batches":
                    spellings[(prog, flag)] = isinstance(action, RenamedOption)
    assert {flag for (_, flag), renamed in spellings.items() if not renamed} == {"--batch-size"}
    assert [key for key, renamed in spellings.items() if renamed] == [
        ("dtbench describe", "--batch")]
