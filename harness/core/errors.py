"""Exceptions the command line turns into exit codes and record statuses."""
from __future__ import annotations

import difflib
from collections.abc import Iterable


class UsageError(ValueError):
    """Bad usage or bad input: the CLI prints the message on one line and exits 2."""


class UnknownNameError(UsageError):
    """A name that is not in a registry; the message lists the known names."""


def did_you_mean(word: str, known: Iterable[str]) -> str | None:
    """The known name closest to a misspelt `word` (git's "did you mean"), or None where none
    is close (difflib's ratio below 0.6)."""
    close = difflib.get_close_matches(word, [str(name) for name in known], n=1)
    return close[0] if close else None


def unknown_name(kind: str, name: object, known: Iterable[str], more: str = "") -> str:
    """The message for a name not among `known`, with the nearest known one where one is
    close: `unknown workload 'restnet50' (did you mean resnet50?); choose from: ...`."""
    names = [str(known_name) for known_name in known]
    close = did_you_mean(str(name), names)
    hint = f" (did you mean {close}?)" if close else ""
    return f"unknown {kind} {name!r}{hint}; choose from: {', '.join(names)}{more}"


class SkipRun(Exception):
    """The combination cannot run here (backend unavailable, unsupported): recorded as `skipped`."""


class RunFailed(Exception):
    """A run started but did not finish properly (diverged, target not reached, rank died).

    `log_tail`: the last lines of the failing ranks' own output (a traceback), kept in the
    record because the rank logs go with the run's temporary directory."""

    def __init__(self, message: str, log_tail: list[str] | None = None) -> None:
        super().__init__(message)
        self.log_tail = list(log_tail or [])


class SchemaError(ValueError):
    """A stored file is not a record this version of dtbench can read."""


OOM_PHRASES = ("out of memory", "not enough memory", "can't allocate memory",
               "cannot allocate memory")


def describe_exception(exc: BaseException) -> str:
    """One line for a crashed run: allocation failures read as "out of memory (...)" whatever
    raised them (MemoryError, torch.OutOfMemoryError, the CPU allocator's RuntimeError)."""
    text = " ".join(str(exc).split())
    if len(text) > 200:
        text = text[:199] + "…"
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError" or any(
            phrase in text.lower() for phrase in OOM_PHRASES):
        return f"out of memory ({type(exc).__name__}{': ' + text if text else ''})"
    return f"{type(exc).__name__}: {text}"


# Exit codes of the command line (docs/spec/command-line.md): 0 success (skips are not
# failures), 1 a run failed or compare found a regression, 2 bad usage or input, 3 compare
# compared nothing (no spec in common, or no samples), 4 nothing ran (every planned run
# skipped: unavailable here).
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NOTHING_COMPARED, EXIT_NOTHING_RAN = 0, 1, 2, 3, 4


def status_of(exc: BaseException) -> tuple[str, str]:
    """The record status and one-line reason for an exception that ended a run: a SkipRun is
    `skipped`, anything else `failed` (a RunFailed says why itself; other exceptions are
    described with their type)."""
    if isinstance(exc, SkipRun):
        return "skipped", str(exc)
    if isinstance(exc, RunFailed):
        return "failed", str(exc)
    return "failed", describe_exception(exc)
