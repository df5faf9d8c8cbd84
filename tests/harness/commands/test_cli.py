"""Bad usage and bad input: exit 2, one `dtbench COMMAND: error:` line, no traceback, nothing
written."""
from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.commands.cli import main

RunCli = Callable[..., subprocess.CompletedProcess[str]]

# (id, arguments, a fragment the error line must contain). Relative paths are created by the
# `inputs` fixture in the test's working directory; every `run` also gets `--out <tmp>/store`.
BAD_INPUTS = [
    ("unknown workload", ["run", "-w", "vgg16"], "unknown workload 'vgg16'"),
    ("unknown backend", ["run", "-w", "lstm", "-b", "tpu"], "unknown backend 'tpu'"),
    ("unknown size", ["run", "-w", "lstm", "--size", "huge"], "invalid choice: 'huge'"),
    ("unknown precision", ["run", "-w", "lstm", "--precision", "fp64"], "invalid choice: 'fp64'"),
    ("unknown mode", ["run", "-w", "lstm", "--mode", "fast"], "invalid choice: 'fast'"),
    ("unknown comm", ["run", "-w", "lstm", "--comm", "pigeon"], "invalid choice: 'pigeon'"),
    ("unknown launcher", ["run", "-w", "lstm", "--launcher", "pbs"], "invalid choice: 'pbs'"),
    ("zero batch size", ["run", "-w", "lstm", "--batch-size", "0"], "--batch-size"),
    ("fractional batch size", ["run", "-w", "lstm", "--batch-size", "1.5"], "--batch-size"),
    ("negative steps", ["run", "-w", "lstm", "--steps", "-1"], "--steps"),
    ("non-numeric steps", ["run", "-w", "lstm", "--steps", "abc"], "'abc'"),
    ("negative warmup", ["run", "-w", "lstm", "--warmup", "-1"], "--warmup"),
    ("zero repeat", ["run", "-w", "lstm", "--repeat", "0"], "--repeat"),
    ("zero ranks", ["run", "-w", "lstm", "-n", "0"], "-n/--nproc"),
    ("empty rank in list", ["run", "-w", "lstm", "-n", "1,,2"], "'1,,2'"),
    ("nccl on cpu", ["run", "-w", "lstm", "-b", "cpu", "--comm", "nccl"], "--backend cuda"),
    ("fp16 on cpu", ["run", "-w", "lstm", "-b", "cpu", "--precision", "fp16"], "fp16"),
    ("ranks without comm", ["run", "-w", "lstm", "-n", "2", "--comm", "none"],
     "needs a communication backend"),
    ("unwritable out", ["run", "-w", "lstm", "--out", "afile/sub"], "not writable"),
    ("missing data file", ["run", "-w", "alexnet", "--data", "absent.npz"], "no such file"),
    ("malformed data file", ["run", "-w", "alexnet", "--data", "x.npz"], "not a valid .npz"),
    ("binary text data", ["run", "-w", "lstm", "--data", "binary.txt"], "looks binary"),
    ("data extension", ["run", "-w", "alexnet", "--data", "notes.txt"], "unknown extension"),
    ("suite unknown key", ["run", "unknown_key.toml"], "unknown top-level key 'title'"),
    ("suite unknown run key", ["run", "unknown_run_key.toml"], "unknown key 'gpus'"),
    ("malformed suite", ["run", "malformed.toml"], "not valid TOML"),
    ("missing suite file", ["run", "absent.toml"], "no such file"),
    ("unknown suite name", ["run", "nightly"], "unknown suite 'nightly'"),
    ("workload not in suite", ["run", "lstm_only.toml", "-w", "alexnet"],
     "has no run of workload 'alexnet'"),
    ("unknown workload in suite", ["run", "quick", "-w", "vgg16"], "unknown workload 'vgg16'"),
    ("json into a missing directory", ["run", "-w", "lstm", "--json", "nowhere/r.json"],
     "does not exist"),
    ("json is a directory", ["run", "-w", "lstm", "--json", "adir"], "is a directory"),
    ("unknown subcommand", ["frobnicate"], "invalid choice: 'frobnicate'"),
    ("unknown option", ["run", "--turbo"], "unrecognized arguments"),
    ("describe unknown workload", ["describe", "vgg16"], "unknown workload 'vgg16'"),
    ("describe unknown size", ["describe", "lstm", "--size", "huge"], "invalid choice"),
    ("peak unknown backend", ["peak", "--backend", "tpu"], "invalid choice: 'tpu'"),
    ("peak precision the backend lacks", ["peak", "--backend", "cpu", "--precision", "fp16"],
     "has no fp16"),
    ("unknown compression", ["run", "-w", "lstm", "--compression", "zip"], "invalid choice"),
    ("zero threads", ["run", "-w", "lstm", "--threads", "0"], "--threads"),
    ("negative seed", ["run", "-w", "lstm", "--seed", "-3"], "--seed"),
    ("non-numeric port", ["run", "-w", "lstm", "--master-port", "abc"], "--master-port"),
    ("missing hostfile", ["run", "-w", "lstm", "--hostfile", "nohosts"], "--hostfile nohosts"),
    ("abbreviated option", ["run", "-w", "lstm", "--out", "store", "--precis", "bf16"],
     "unrecognized arguments"),
    ("comm size with unknown suffix", ["comm", "--sizes", "4Q"], "cannot read '4Q'"),
    ("comm size zero", ["comm", "--sizes", "0"], "'0' is outside"),
    ("comm range backwards", ["comm", "--sizes", "64M:1K"], "runs backwards"),
    ("comm range not powers of two", ["comm", "--sizes", "3K:64M"], "not a power of two"),
    ("comm unknown collective", ["comm", "--op", "gather"], "unknown collective 'gather'"),
    ("comm zero iterations", ["comm", "--iters", "0"], "--iters"),
    ("comm several rank counts", ["comm", "-n", "1,2"], "takes one rank count"),
    ("report missing path", ["report", "absent_dir"], "absent_dir: no such file"),
    ("report unknown format", ["report", "--format", "pdf"], "invalid choice: 'pdf'"),
    ("report into a missing directory", ["report", "foreign.json", "-o", "nowhere/r.md"],
     "does not exist"),
    ("compare missing baseline", ["compare", "absent.json", "foreign.json"],
     "absent.json: no such file"),
    ("compare foreign files only", ["compare", "foreign.json", "foreign.json"],
     "no readable dtbench records"),
    ("compare one argument", ["compare", "foreign.json"], "name both BASELINE and CANDIDATE"),
    ("compare threshold not a number", ["compare", "a", "b", "--threshold", "abc"],
     "--threshold"),
    ("compare threshold zero", ["compare", "a", "b", "--threshold", "0"], "above 0"),
    ("sbatch unknown suite", ["sbatch", "nightly"], "unknown suite 'nightly'"),
    ("kernels unknown set", ["kernels", "--set", "huge"], "unknown kernel set 'huge'"),
    ("kernels precision the backend lacks", ["kernels", "-b", "cpu", "--precision", "fp16"],
     "has no fp16"),
    ("kernels json into a missing directory", ["kernels", "--json", "nowhere/k.json"],
     "does not exist"),
    ("run kernels with a training option", ["run", "kernels", "-w", "alexnet"],
     "--workload does not apply"),
    ("suite with an unknown kernel set", ["run", "kernels_bad.toml"],
     "kernels.set must be one of"),
    ("sbatch a kernel suite", ["sbatch", "kernels"], "runs kernel benchmarks"),
]

SUBPROCESS_CASES = ("non-numeric steps", "unknown subcommand", "unknown workload",
                    "malformed data file", "unwritable out", "kernels unknown set")


@pytest.fixture
def inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Bad files in a fresh working directory; returns the store path no run may create."""
    (tmp_path / "afile").write_text("a regular file\n")
    (tmp_path / "x.npz").write_text("this is text, not an npz archive\n")
    (tmp_path / "notes.txt").write_text("plain notes\n")
    (tmp_path / "binary.txt").write_bytes(b"some\x00binary\x00bytes")
    (tmp_path / "adir").mkdir()
    (tmp_path / "unknown_key.toml").write_text('title = "x"\n[[runs]]\nworkload = "lstm"\n')
    (tmp_path / "unknown_run_key.toml").write_text('[[runs]]\nworkload = "lstm"\ngpus = 4\n')
    (tmp_path / "malformed.toml").write_text('[[runs]\nworkload = "lstm"\n')
    (tmp_path / "lstm_only.toml").write_text('[[runs]]\nworkload = "lstm"\nsize = "tiny"\n')
    (tmp_path / "foreign.json").write_text('{"hello": 1}\n')
    (tmp_path / "kernels_bad.toml").write_text('[kernels]\nset = "huge"\n')
    monkeypatch.chdir(tmp_path)
    return tmp_path / "store"


def with_out(arguments: list[str], store: Path) -> list[str]:
    if arguments[:1] == ["run"] and "--out" not in arguments:
        return [*arguments, "--out", str(store)]
    return arguments


# One prefix: the program (with the command where one was named), then `error:`, once.
ERROR_LINE = re.compile(r"^dtbench( [a-z]+)?: error: ")


def check_one_error_line(stderr: str, fragment: str) -> None:
    assert "Traceback" not in stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert ERROR_LINE.match(lines[0]), lines[0]
    assert lines[0].count("error:") == 1 and "error: dtbench " not in lines[0], lines[0]
    assert fragment in lines[0]


@pytest.mark.parametrize("arguments, fragment", [case[1:] for case in BAD_INPUTS],
                         ids=[case[0] for case in BAD_INPUTS])
def test_bad_input_exits_2_with_one_line(inputs: Path, capsys: pytest.CaptureFixture[str],
                                         arguments: list[str], fragment: str) -> None:
    before = sorted(p.name for p in inputs.parent.iterdir())
    assert main(with_out(arguments, inputs)) == 2
    captured = capsys.readouterr()
    check_one_error_line(captured.err, fragment)
    assert captured.out == ""
    assert not inputs.exists()
    assert sorted(p.name for p in inputs.parent.iterdir()) == before
    assert (inputs.parent / "afile").read_text() == "a regular file\n"


def test_there_are_enough_distinct_bad_inputs() -> None:
    assert len({case[0] for case in BAD_INPUTS}) == len(BAD_INPUTS) >= 18


@pytest.mark.parametrize("case", SUBPROCESS_CASES)
def test_bad_input_in_a_real_process(inputs: Path, run_cli: RunCli, case: str) -> None:
    arguments, fragment = next(c[1:] for c in BAD_INPUTS if c[0] == case)
    result = run_cli(*with_out(arguments, inputs))
    assert result.returncode == 2
    check_one_error_line(result.stderr, fragment)
    assert result.stdout == ""
    assert not inputs.exists()


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from harness import __version__

    with pytest.raises(SystemExit) as caught:
        main(["--version"])
    assert caught.value.code == 0
    assert capsys.readouterr().out.strip() == f"dtbench {__version__}"


def test_list_json_names_everything_with_availability(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert sorted(w["name"] for w in data["workloads"]) == ["alexnet", "gpt", "hep_cnn",
                                                            "lstm", "resnet50"]
    for section in ("backends", "comm", "launchers"):
        for entry in data[section]:
            assert isinstance(entry["available"], bool)
            assert entry["available"] or entry["reason"]
    cpu = next(b for b in data["backends"] if b["name"] == "cpu")
    assert cpu["available"] and "fp32" in cpu["precisions"]
    assert {"quick", "standard"} <= {s["name"] for s in data["suites"]}
    assert "throughput" in data["collectors"]


def test_every_subcommand_help_renders() -> None:
    """`dtbench COMMAND --help` formats for every command: a help text with a bare `%`
    (sbatch's `%x-%j` log pattern once) makes argparse raise instead of printing."""
    import argparse

    from harness.commands.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert len(commands.choices) >= 5
    for name, sub in commands.choices.items():
        text = sub.format_help()
        assert name in text and "--help" in text, name
