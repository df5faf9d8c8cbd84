"""The fast tier's rule: a test that starts a process (a dtbench run's ranks, a server, a
namespace, a browser, a virtual environment, an MPI job) is `slow`, found by reading the code
it runs, not by someone remembering to mark it.

At collection every test is read, with the module-level functions and the fixtures it uses
(transitively): a test whose code starts a process gets the `slow` mark. While the fast tier
runs, a guard fails any test that starts a Python, MPI, Slurm, PostgreSQL, browser or
network-namespace process without the mark, naming what it started: the rule cannot drift.
"""
from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FunctionType, ModuleType
from typing import Any

import pytest

# Calls that start a process, directly or through dtbench (a run launches its ranks; comm,
# kernels in a child, doctor's collectives, peak's own child process).
STARTS_A_PROCESS = re.compile(
    r"subprocess\.(run|Popen|call|check_call|check_output)|\bPopen\(|os\.(system|fork|spawn)"
    r"|multiprocessing|mp\.spawn|\.spawn\(|ProcessPoolExecutor"
    r"|\bmain\(\s*\[\s*\"(run|comm|doctor|sbatch)\""
    r"|\bRunner\(|\blaunch\(|\bSupervisor\(|peak_in_own_process|autocompile\.(settle|decide_switch)"
    r"|probe_in_a_rank"
    r"|ip\s+netns|unshare|chromium|playwright|venv\.create|initdb|pg_ctl"
    r"|\bcli_runner\b|\brun_cli\b|\bdtbench\(")
# What the guard counts as a process a fast test must not start (git, lscpu and the like,
# which the harness itself runs for a fingerprint, are fine).
HEAVY = ("python", "mpirun", "mpiexec", "srun", "sbatch", "torchrun", "postgres", "initdb",
         "pg_ctl", "chromium", "apt-get")
# ... unless only asked for a version; `ip` and `unshare` count when they make a namespace
QUERY_FLAGS = ("--version", "-V", "--help")
NAMESPACE_TOOLS = ("ip", "unshare")
MAX_DEPTH = 3


def _source(obj: Any) -> str:
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        return ""


TESTS = Path(__file__).resolve().parent


def _ours(value: Any) -> bool:
    """Whether a function or class is the tests' own code (a helper module under tests/)."""
    module = sys.modules.get(getattr(value, "__module__", "") or "")
    path = getattr(module, "__file__", None)
    return bool(path) and Path(path).resolve().is_relative_to(TESTS)


def _called_functions(function: FunctionType, module: ModuleType) -> list[FunctionType]:
    """The tests' own functions (and classes' methods) a function names, from its module or
    imported from a helper module under tests/."""
    names = set(function.__code__.co_names)
    for const in function.__code__.co_consts:
        if inspect.iscode(const):
            names |= set(const.co_names)
    found = []
    for name in names:
        value = getattr(module, name, None)
        if isinstance(value, FunctionType) and _ours(value):
            found.append(value)
        elif inspect.isclass(value) and _ours(value):
            found += [m for m in vars(value).values() if isinstance(m, FunctionType)]
    return found


def starts_a_process(item: pytest.Item) -> bool:
    function = getattr(item, "function", None)
    module = getattr(item, "module", None)
    if function is None or module is None:
        return False
    seen: set[Any] = set()
    todo: list[tuple[Any, int]] = [(function, 0)]
    fixture_defs = getattr(item, "_fixtureinfo", None)
    if fixture_defs is not None:
        for name in item.fixturenames:  # type: ignore[attr-defined]
            for definition in fixture_defs.name2fixturedefs.get(name, ()):
                if getattr(definition.func, "__module__", "") != __name__:  # not the guard
                    todo.append((definition.func, 0))
    while todo:
        current, depth = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        if STARTS_A_PROCESS.search(_source(current)):
            return True
        if depth < MAX_DEPTH and isinstance(current, FunctionType):
            home = sys.modules.get(current.__module__, module)
            todo += [(f, depth + 1) for f in _called_functions(current, home)]
    return False


def mark_slow(items: list[pytest.Item]) -> int:
    """Mark each test that starts a process `slow`; how many were marked here."""
    marked = 0
    for item in items:
        if item.get_closest_marker("slow") is None and starts_a_process(item):
            item.add_marker(pytest.mark.slow)
            marked += 1
    return marked


def _words(args: Any) -> list[str]:
    if isinstance(args, (list, tuple)):
        return [str(a) for a in args]
    return str(args).split()


def heavy(args: Any) -> str | None:
    """The command line a fast test must not start, shortened, or None."""
    words = _words(args)
    if not words:
        return None
    name = Path(words[0]).name.lower()
    if name in NAMESPACE_TOOLS and "netns" not in words and name != "unshare":
        return None
    if not (name in NAMESPACE_TOOLS or name == Path(sys.executable).name
            or name.startswith(HEAVY)) or any(flag in words for flag in QUERY_FLAGS):
        return None
    return " ".join([name, *words[1:4]])


@pytest.fixture(autouse=True)
def fast_tests_start_no_process(request: pytest.FixtureRequest) -> Iterator[None]:
    """In a test without the slow mark, starting a heavy process fails the test."""
    if request.node.get_closest_marker("slow") is not None or \
            os.environ.get("DTBENCH_SLOW_RULE") == "off":
        yield
        return
    started: list[str] = []
    real_init: Callable[..., None] = subprocess.Popen.__init__

    def watched(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
        command = heavy(args)
        if command:
            started.append(command)
        real_init(self, args, *rest, **kwargs)

    subprocess.Popen.__init__ = watched  # type: ignore[method-assign]
    try:
        yield
    finally:
        subprocess.Popen.__init__ = real_init  # type: ignore[method-assign]
    if started:
        pytest.fail(f"a test outside the slow tier started {'; '.join(sorted(set(started)))}:"
                    " tests/slowrule.py did not see it (extend STARTS_A_PROCESS, or mark the "
                    "test slow)", pytrace=False)
