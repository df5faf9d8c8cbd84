"""The layout is the data flow: layers import only downwards, no module imports itself back
through others, and modules stay small enough to read."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("harness", "backends", "workloads")
MAX_MODULE_LINES = 420  # "about 400": a module past it is usually two ideas
# The one module that reads a record's `task` and says what follows from it.
KINDS_MODULE = "harness/spec/kinds.py"


def test_import_linter_contracts_are_kept() -> None:
    code = "from importlinter.cli import lint_imports_command; lint_imports_command()"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles_between_modules() -> None:
    """Imports under TYPE_CHECKING and inside functions count: a cycle hidden from the
    interpreter is still two modules that cannot be read (or changed) one without the other."""
    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=False)
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    assert _cycles(edges) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_is_over_the_size_limit() -> None:
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines())
             for package in PACKAGES for p in (ROOT / package).rglob("*.py")}
    assert len({path.split("/")[0] for path in sizes}) == len(PACKAGES)
    assert {path: n for path, n in sizes.items() if n > MAX_MODULE_LINES} == {}


def _reads_task(node: ast.AST) -> bool:
    """x.get("task"), x["task"], or a name or attribute called task."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return (node.func.attr == "get" and bool(node.args)
                and isinstance(node.args[0], ast.Constant) and node.args[0].value == "task")
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "task"
    return (isinstance(node, ast.Name) and node.id == "task") or (
        isinstance(node, ast.Attribute) and node.attr == "task")


def task_comparisons(source: str) -> list[int]:
    """The lines that compare a record's task (with ==, !=, in, is ...) to anything."""
    return sorted(node.lineno for node in ast.walk(ast.parse(source))
                  if isinstance(node, ast.Compare)
                  and any(_reads_task(side) for side in (node.left, *node.comparators)))


def test_only_the_kinds_module_compares_a_records_task() -> None:
    """What a record is follows from its kind (harness/spec/kinds.py: kind_of(spec)), not
    from a test of the `task` string in each reader."""
    found = {str(path.relative_to(ROOT)): lines
             for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))
             if (lines := task_comparisons(path.read_text()))}
    assert set(found) <= {KINDS_MODULE}, found
    assert KINDS_MODULE in found  # the scan sees the comparisons it is there to find


def test_the_task_scan_finds_each_spelling() -> None:
    source = """
a = spec.get("task") == "comm"
b = record["spec"]["task"] in ("kernel", None)
c = task != KERNEL_TASK
d = view.task is None
e = spec.get("tasks") == "comm"
f = {"task": "comm"}
"""
    assert task_comparisons(source) == [2, 3, 4, 5]


def _volume_formulas() -> set[str]:
    """The functions of harness.strategies.volumes that return a strategy's bytes by kind."""
    import inspect
    import typing

    from harness.strategies import volumes

    return {name for name, function in vars(volumes).items()
            if inspect.isfunction(function) and function.__module__ == volumes.__name__
            and typing.get_type_hints(function).get("return") == volumes.Volumes}


def test_predict_step_models_call_no_volume_formula() -> None:
    """A strategy's bytes are said once, by its class's traffic() (issue 53): predict's step
    models read them through Context.traffic and name no per-kind formula of volumes.py
    (the shapes of a collective, such as tp_layer_collectives, they may read)."""
    import ast

    formulas = _volume_formulas()
    assert {"ddp", "zero1", "fsdp", "ps_sync", "pipeline", "tensor", "by_kind"} <= formulas
    named = set()
    for path in sorted((ROOT / "harness" / "predict").glob("*.py")):
        aliases = {"volumes"}
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "harness.strategies":
                aliases |= {a.asname or a.name for a in node.names if a.name == "volumes"}
            if isinstance(node, ast.ImportFrom) and node.module == "harness.strategies.volumes":
                named |= {(path.name, a.name) for a in node.names}
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in aliases:
                named.add((path.name, node.attr))
    assert {(module, name) for module, name in named if name in formulas} == set()
