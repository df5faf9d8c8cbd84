"""Suites: the built-ins parse, lists expand to a product, every bad file is one clear error."""
from __future__ import annotations

from pathlib import Path

import pytest

from harness.core.errors import UsageError
from harness.run.suites import RUN_KEYS, builtin_names, load_suite, parse_suite

WORKLOADS = {"alexnet", "resnet50", "hep_cnn", "lstm"}


def write(tmp_path: Path, text: str, name: str = "mine.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_builtin_names() -> None:
    assert {"quick", "standard", "scaling"} <= set(builtin_names())


def test_quick_runs_each_workload_once_at_small_size() -> None:
    suite = load_suite("quick")
    assert suite.name == "quick" and suite.description
    assert {run["workload"] for run in suite.runs} == WORKLOADS
    assert len(suite.runs) == 4
    assert all(run["size"] == "small" and run["precision"] == "fp32" for run in suite.runs)


def test_standard_asks_for_every_precision_of_the_backend() -> None:
    suite = load_suite("standard")
    assert {run["workload"] for run in suite.runs} == WORKLOADS | {"gpt"}
    assert all(run["precision"] == "all" and run["size"] == "small" for run in suite.runs)


def test_strategies_runs_gpt_small_under_fsdp_tp_tensor_and_pipeline() -> None:
    suite = load_suite("strategies")
    gpt = {run["strategy"] for run in suite.runs if run["workload"] == "gpt"}
    assert {"ddp", "fsdp", "tensor", "pipeline", "fsdp-tp"} <= gpt
    assert all(run["size"] == "small" for run in suite.runs if run["workload"] == "gpt")


def test_scaling_runs_one_rank_before_several_over_gloo_and_mpi() -> None:
    suite = load_suite("scaling")
    world_sizes = [run.get("nproc", 1) for run in suite.runs]
    assert world_sizes == sorted(world_sizes) and world_sizes[0] == 1 and max(world_sizes) > 1
    combos = {(run.get("comm", "none"), run.get("launcher", "local")) for run in suite.runs
              if run.get("nproc", 1) > 1}
    assert combos == {("gloo", "local"), ("mpi", "mpirun")}


def test_lists_expand_to_the_cartesian_product(tmp_path: Path) -> None:
    path = write(tmp_path, """
name = "sweep"
description = "a sweep"
[defaults]
size = "tiny"
steps = 3
[[runs]]
workload = ["alexnet", "lstm"]
precision = ["fp32", "bf16"]
batch_size = [4, 8, 16]
[[runs]]
workload = "hep_cnn"
size = "small"
""")
    suite = load_suite(str(path))
    assert suite.name == "sweep" and suite.description == "a sweep"
    assert len(suite.runs) == 2 * 2 * 3 + 1
    combos = {(r["workload"], r["precision"], r["batch_size"]) for r in suite.runs[:12]}
    assert combos == {(w, p, b) for w in ("alexnet", "lstm") for p in ("fp32", "bf16")
                      for b in (4, 8, 16)}
    assert all(r["size"] == "tiny" and r["steps"] == 3 for r in suite.runs[:12])
    assert suite.runs[12] == {"size": "small", "steps": 3, "workload": "hep_cnn"}


def test_name_defaults_to_the_file_stem(tmp_path: Path) -> None:
    path = write(tmp_path, '[[runs]]\nworkload = "lstm"\n', name="nightly.toml")
    suite = load_suite(str(path))
    assert suite.name == "nightly" and suite.runs == ({"workload": "lstm"},)


BAD_SUITES = [
    ("invalid toml", '[[runs]\nworkload = "lstm"\n', "not valid TOML"),
    ("unknown top-level key", 'title = "x"\n[[runs]]\nworkload = "lstm"\n',
     "unknown top-level key 'title'"),
    ("unknown run key", '[[runs]]\nworkload = "lstm"\nbatchsize = 4\n',
     "unknown key 'batchsize' in runs[0]"),
    ("unknown defaults key", '[defaults]\nsteps_ = 1\n[[runs]]\nworkload = "lstm"\n',
     "unknown key 'steps_' in defaults"),
    ("string for int", '[[runs]]\nworkload = "lstm"\nsteps = "10"\n',
     "runs[0].steps must be an integer"),
    ("float for int", '[[runs]]\nworkload = "lstm"\nbatch_size = 2.5\n',
     "runs[0].batch_size must be an integer"),
    ("bool for int", '[[runs]]\nworkload = "lstm"\nnproc = true\n',
     "runs[0].nproc must be an integer"),
    ("int for str", '[[runs]]\nworkload = 3\n', "runs[0].workload must be a str"),
    ("str for bool", '[[runs]]\nworkload = "lstm"\nchannels_last = "yes"\n',
     "runs[0].channels_last must be a bool"),
    ("int for bool or str", '[[runs]]\nworkload = "lstm"\ncompile = 1\n',
     "runs[0].compile must be a bool or str"),
    ("mixed list", '[[runs]]\nworkload = ["lstm", 4]\n', "runs[0].workload must be a str"),
    ("zero steps", '[[runs]]\nworkload = "lstm"\nsteps = 0\n', "runs[0].steps must be positive"),
    ("negative batch", '[[runs]]\nworkload = "lstm"\nbatch_size = -8\n',
     "runs[0].batch_size must be positive"),
    ("zero in a list", '[[runs]]\nworkload = "lstm"\nnproc = [1, 0]\n',
     "runs[0].nproc must be positive"),
    ("zero repeat", '[defaults]\nrepeat = 0\n[[runs]]\nworkload = "lstm"\n',
     "defaults.repeat must be positive"),
    ("negative warmup", '[[runs]]\nworkload = "lstm"\nwarmup = -1\n',
     "runs[0].warmup must be >= 0"),
    ("empty list", '[[runs]]\nworkload = []\n', "runs[0].workload is an empty list"),
    ("no runs", 'name = "x"\n', "at least one [[runs]] table"),
    ("empty runs", 'runs = []\n', "at least one [[runs]] table"),
    ("runs as a table", '[runs]\nworkload = "lstm"\n', "at least one [[runs]] table"),
    ("run without workload", '[[runs]]\nworkload = "lstm"\n[[runs]]\nsteps = 3\n',
     "runs[1] has no workload"),
    ("defaults not a table", 'defaults = 3\n[[runs]]\nworkload = "lstm"\n',
     "defaults must be a table"),
    ("name not a string", 'name = 5\n[[runs]]\nworkload = "lstm"\n',
     "name and description must be strings"),
]


@pytest.mark.parametrize("text, problem", [case[1:] for case in BAD_SUITES],
                         ids=[case[0] for case in BAD_SUITES])
def test_bad_suite_is_a_usage_error_naming_file_and_problem(tmp_path: Path, text: str,
                                                            problem: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(UsageError) as caught:
        load_suite(str(path))
    message = str(caught.value)
    assert message.startswith(f"suite {path}: ")
    assert problem in message
    assert "\n" not in message


def test_unknown_run_key_lists_the_valid_keys(tmp_path: Path) -> None:
    path = write(tmp_path, '[[runs]]\nworkload = "lstm"\ngpus = 4\n')
    with pytest.raises(UsageError) as caught:
        load_suite(str(path))
    for key in RUN_KEYS:
        assert key in str(caught.value)


def test_negative_seed_is_rejected_naming_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, '[[runs]]\nworkload = "lstm"\nseed = -1\n')
    with pytest.raises(UsageError, match="suite .*mine.toml: runs\\[0\\].seed"):
        load_suite(str(path))


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"suite .*absent\.toml: no such file"):
        load_suite(str(tmp_path / "absent.toml"))


def test_directory_is_not_a_suite(tmp_path: Path) -> None:
    folder = tmp_path / "dir.toml"
    folder.mkdir()
    with pytest.raises(UsageError, match="dir.toml: cannot read"):
        load_suite(str(folder))


def test_non_utf8_file(tmp_path: Path) -> None:
    path = tmp_path / "latin.toml"
    path.write_bytes(b'name = "caf\xe9"\n')
    with pytest.raises(UsageError, match="not UTF-8"):
        load_suite(str(path))


def test_unknown_suite_name_lists_the_builtins() -> None:
    with pytest.raises(UsageError) as caught:
        load_suite("nightly-gpu")
    message = str(caught.value)
    assert "unknown suite 'nightly-gpu'" in message
    for name in builtin_names():
        assert name in message


def test_parse_suite_source_appears_in_errors() -> None:
    with pytest.raises(UsageError, match="^inline: "):
        parse_suite("oops = 1\n", "inline", "x")


def test_kernels_suite_names_a_kernel_set_instead_of_runs(tmp_path: Path) -> None:
    suite = load_suite("kernels")
    assert suite.runs == () and suite.kernels == {"set": "workloads", "precision": ["fp32"]}
    mine = load_suite(str(write(tmp_path, '[kernels]\nset = "sweep"\nprecision = "bf16"\n')))
    assert mine.kernels == {"set": "sweep", "precision": ["bf16"]}


@pytest.mark.parametrize("text, fragment", [
    ('[kernels]\nset = "huge"\n', "kernels.set must be one of tiny, workloads"),
    ('[kernels]\nset = "tiny"\nprecision = ["fp64"]\n', "kernels.precision must be one"),
    ('[kernels]\nset = "tiny"\nthreads = 2\n', "unknown key 'threads' in kernels"),
    ('kernels = 3\n', "kernels must be a table"),
    ('[kernels]\nset = "tiny"\n[[runs]]\nworkload = "lstm"\n', "not both"),
])
def test_bad_kernels_table(tmp_path: Path, text: str, fragment: str) -> None:
    with pytest.raises(UsageError, match=fragment):
        load_suite(str(write(tmp_path, text)))
