"""The documentation in the repository stays true to the code: commands, metrics, strategies
and links the docs name exist, and nothing points outside the repository."""
from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path

import pytest

from harness.commands.cli import build_parser
from harness.facts.metrics import CATALOGUE, PER_RECORD, metric_info
from harness.strategies import STRATEGIES

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
METRIC = re.compile(r"(?:Metric|measured)\(\s*(f?)\"([^\"]+)\"")
SPEC_REFERENCE = re.compile(r"SPEC\s+(section\s*|§\s*)\d+")


def _table_first_cells(text: str, heading: str) -> list[str]:
    """The back-quoted first cells of the first table under `heading`."""
    section = text.split(heading, 1)[1]
    cells, started = [], False
    for line in section.splitlines():
        if line.startswith("|"):
            started = True
            match = re.match(r"\|\s*`([^`]+)`", line)
            if match:
                cells.append(match.group(1))
        elif started:
            break
    return cells


def _subcommands() -> set[str]:
    parser = build_parser()
    actions = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    return set(actions[0].choices)


def _tracked(*patterns: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z", *patterns], cwd=ROOT, capture_output=True,
                         check=True).stdout.decode()
    return [ROOT / name for name in out.split("\0") if name and (ROOT / name).is_file()]


def _markdown_pages() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def test_readme_is_short() -> None:
    assert len(README.read_text().splitlines()) <= 200


def test_quick_start_has_exactly_the_two_commands() -> None:
    section = README.read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    assert block.splitlines() == [
        "python3 -m pip install -e . && dtbench run",
        "python3 -m pip install -e '.[test]' && python3 -m pytest",
    ]


def test_ci_runs_the_quick_start_test_command() -> None:
    assert 'python3 -m pytest "$@"' in (ROOT / ".ci" / "run").read_text()


def test_command_table_lists_every_subcommand_and_only_those() -> None:
    table = _table_first_cells((DOCS / "spec" / "command-line.md").read_text(), "## Commands")
    assert table, "no command table in docs/spec/command-line.md"
    assert set(table) == _subcommands()


def _documented_options() -> dict[str, set[str]]:
    """The flags docs/spec/command-line.md gives each command: those back-quoted in the
    paragraphs that open with it (**`run [SUITE]`**: ...) and in a table right after one;
    "`--json` lists" names what another command wrote, not an option."""
    text = (DOCS / "spec" / "command-line.md").read_text().split("## Options", 1)[1]
    found: dict[str, set[str]] = {}
    # the shared groups' bullets: "- **output** (`run`, `comm`): `--out STORE`, ..."
    for bullet in re.findall(r"^- \*\*[a-z]+\*\* \(([^)]*)\):(.*?)(?=^- |^$)", text,
                             re.M | re.S):
        for command in re.findall(r"`([a-z]+)`", bullet[0]):
            found.setdefault(command, set()).update(
                re.findall(r"`(?:-[a-z]/)?(--[a-z][a-z-]*)", bullet[1]))
    command = None
    for paragraph in text.split("\n\n"):
        opening = re.match(r"\*\*`([a-z]+)", paragraph)
        if opening:
            command = opening.group(1)
        elif not paragraph.startswith("|"):
            command = None
        if command is not None:
            found.setdefault(command, set()).update(
                re.findall(r"`(?:-[a-z]/)?(--[a-z][a-z-]*)(?![^`]*` lists)", paragraph))
    return found


def _parser_options() -> dict[str, set[str]]:
    """Each command's long flags, those of its own subcommands (data make) included."""
    def flags(parser: argparse.ArgumentParser) -> set[str]:
        own = {flag for action in parser._actions for flag in action.option_strings
               if flag.startswith("--") and flag != "--help"}
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    own |= flags(sub)
        return own

    parser = build_parser()
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {name: flags(sub) for name, sub in actions[0].choices.items()}


def test_every_option_of_every_subcommand_is_documented_under_it() -> None:
    documented = _documented_options()
    missing = [f"{name} {flag}" for name, flags in _parser_options().items()
               for flag in sorted(flags - documented.get(name, set()))]
    assert not missing, f"options not in docs/spec/command-line.md: {missing}"


def test_the_run_options_table_is_the_declarations() -> None:
    """docs/spec/command-line.md's `run` table is generated from the run-field declaration:
    every option, its spelling and its text come from there, so none is missing or stale."""
    from harness.commands.run import registry_choices, run_options
    from harness.spec.fields import options_table

    table = options_table(run_options(), registry_choices())
    text = (DOCS / "spec" / "command-line.md").read_text()
    assert table in text, ("docs/spec/command-line.md's `run` table differs from the "
                           f"declaration; replace it with:\n{table}")


def test_every_documented_option_exists() -> None:
    options = _parser_options()
    assert set(_documented_options()) == set(options)
    unknown = [f"{name} {flag}" for name, flags in _documented_options().items()
               for flag in sorted(flags - options[name])]
    assert not unknown, f"docs/spec/command-line.md names options the parser lacks: {unknown}"


def test_the_documented_threads_defaults_are_what_the_commands_do(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`run` gives each rank the usable cores divided by the ranks per node (the docs once said
    1, which is `comm`'s)."""
    from harness.run.plan import resolve

    monkeypatch.setattr("os.sched_getaffinity", lambda _pid: set(range(8)))
    spec = resolve({"workload": "lstm", "size": "tiny", "backend": "cpu", "nproc": 2,
                    "comm": "gloo"}, None)
    assert spec.threads == 4
    text = " ".join((DOCS / "spec" / "command-line.md").read_text().split())
    assert ("`run`: default the usable cores divided by the ranks per node on `cpu`" in text
            and "`comm`: default 1" in text and "(`run`, `comm`; default 1)" not in text)


def _emitted_metric_names() -> set[str]:
    names = set()
    for path in (ROOT / "harness").rglob("*.py"):
        for is_f, name in METRIC.findall(path.read_text()):
            names.add(name.split("{", 1)[0] + "*" if is_f else name)
    return names


def test_metric_names_are_found_in_the_code() -> None:
    assert {"throughput", "step_time", "mfu", "comm_bytes_*", "phase_*"} <= _emitted_metric_names()


def test_every_emitted_metric_is_documented() -> None:
    text = (DOCS / "spec" / "metrics.md").read_text()
    documented = set(re.findall(r"`([a-z_0-9*]+)`", text))
    missing = []
    for name in _emitted_metric_names():
        if name.endswith("*"):
            if not any(d.startswith(name[:-1]) and d != name[:-1] for d in documented):
                missing.append(name)
        elif name not in documented:
            missing.append(name)
    assert not missing, f"metrics emitted but not in docs/spec/metrics.md: {sorted(missing)}"


def _documented_metrics() -> list[tuple[str, str, str]]:
    """(name, unit, better) of every row of the metric tables in docs/spec/metrics.md: each
    back-quoted name of the first cell (a family as `prefix_*`), the unit and direction
    cells without their explanation (after a colon or in brackets)."""
    rows, header = [], False
    for line in (DOCS / "spec" / "metrics.md").read_text().splitlines():
        if line.startswith("| name | unit | better |"):
            header = True
        elif header and line.startswith("| `"):
            names, unit, better = (cell.strip() for cell in line.strip("|").split(" | ")[:3])
            plain = [re.split(r" \(|:", cell)[0].strip() for cell in (unit, better)]
            rows += [(name, *plain) for name in re.findall(r"`([a-z_0-9*]+)`", names)]
        elif not line.startswith("|"):
            header = False
    return rows


def test_the_metric_docs_and_the_catalogue_agree() -> None:
    """Every documented metric is in the catalogue (harness/facts/metrics.py) with the unit and
    direction the docs give it, and every catalogued metric is documented."""
    rows = _documented_metrics()
    assert len(rows) > 50
    wrong = []
    for name, unit, better in rows:
        info = metric_info(name.rstrip("*"))
        if info is None or (name.endswith("*") and not info.family):
            wrong.append(f"{name}: not in the catalogue")
            continue
        if (info.unit or PER_RECORD, info.better or PER_RECORD) != (unit, better):
            wrong.append(f"{name}: docs say {unit}, {better}; the catalogue "
                         f"{info.unit or PER_RECORD}, {info.better or PER_RECORD}")
    assert not wrong, "docs/spec/metrics.md and harness/facts/metrics.py disagree: " + \
        "; ".join(wrong)
    documented = {name.rstrip("*") for name, _, _ in rows}
    missing = [info.name for info in CATALOGUE if info.name not in documented]
    assert not missing, f"catalogued but not in docs/spec/metrics.md: {missing}"


def test_every_strategy_and_option_is_documented() -> None:
    """The options table of docs/spec/strategies.md is the one the strategy classes declare:
    every strategy, option, default, alias, bound and predict-only assumption."""
    from harness.strategies.strategy_options import options_markdown

    text = (DOCS / "spec" / "strategies.md").read_text()
    start = text.index("| strategy | option |")
    documented = text[start:text.index("\n\n", start) + 1]
    declared = options_markdown((name, STRATEGIES.get(name).options)
                                for name in STRATEGIES.names())
    assert documented == declared, \
        "regenerate the table with harness.strategies.strategy_options.options_markdown"
    assert all(f"| `{name}` |" in documented for name in STRATEGIES.names())


@pytest.mark.parametrize("page", _markdown_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#", 1)[0]).resolve()
        if not path.exists():
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)}: broken links {broken}"


def test_nothing_refers_outside_the_repository() -> None:
    needle = "../" + "shared"
    offenders = [str(p.relative_to(ROOT)) for p in _tracked()
                 if p.suffix not in {".json", ".html", ".png"}
                 and needle in p.read_text(errors="ignore")]
    assert not offenders


def test_no_reference_to_spec_sections_outside_docs() -> None:
    offenders = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in _tracked("*.py")
                 for m in SPEC_REFERENCE.finditer(p.read_text())]
    assert not offenders, offenders


def test_what_runs_where_matches_every_strategys_declarations() -> None:
    """docs/guide/strategies.md's table of strategy x backend is the declarations, and every
    'no' is refused by the planner with the reason the table gives."""
    from harness.core.errors import UsageError
    from harness.spec.specs import RunSpec

    text = (ROOT / "docs" / "guide" / "strategies.md").read_text()
    rows = {}
    for line in text.split("## What runs where", 1)[1].splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0] in STRATEGIES:
            rows[cells[0]] = cells
    assert set(rows) == set(STRATEGIES)
    for name, (_, gloo, mpi, nccl, launchers, why) in rows.items():
        declared = STRATEGIES.get(name)
        assert [gloo, mpi, nccl] == ["yes" if c in declared.comms else "no"
                                     for c in ("gloo", "mpi", "nccl")], name
        assert launchers == ", ".join(declared.launchers), name
        if nccl == "no":
            assert why == declared.comm_reason and why
            spec = RunSpec(workload="hep_cnn", size="tiny", backend="cuda", comm="nccl",
                           nproc_per_node=3, batch_per_rank=4, steps=3, strategy=name,
                           strategy_options=declared.parse_options(
                               {"s": 2} if name == "ssp" else {}))
            try:
                declared.check(spec)
            except UsageError as exc:
                assert why in str(exc), name
            else:
                raise AssertionError(f"{name} on nccl was not refused")
