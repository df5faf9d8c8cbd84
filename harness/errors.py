"""Exceptions the command line turns into exit codes and record statuses."""
from __future__ import annotations


class UsageError(ValueError):
    """Bad usage or bad input: the CLI prints the message on one line and exits 2."""


class UnknownNameError(UsageError):
    """A name that is not in a registry; the message lists the known names."""


class SkipRun(Exception):
    """The combination cannot run here (backend unavailable, unsupported): recorded as `skipped`."""


class RunFailed(Exception):
    """A run started but did not finish properly (diverged, target not reached, rank died)."""


class SchemaError(ValueError):
    """A stored file is not a record this version of dtbench can read."""
