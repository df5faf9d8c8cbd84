"""`dtbench publish [STORE ...] -o DIR`: the records as a static site that opens from disk."""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

from harness.commands.options import add_record_paths, check_default_store

MARKER = ".dtbench-site"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_record_paths(parser, metavar="STORE")
    parser.add_argument("-o", "--output", required=True, metavar="DIR",
                        help="the site's directory: new, empty, or a site publish wrote "
                        "before (replaced whole)")
    parser.add_argument("--reference", metavar="MACHINE",
                        help="the machine every other is a ratio to (default: the identified "
                        "machine with the most records)")


def check_directory(name: str) -> Path:
    """The -o directory, before any work: its parent exists, and it is new, empty, or a site
    an earlier publish wrote (which is replaced, never merged)."""
    from harness.core.errors import UsageError

    target = Path(name)
    if target.exists() and not target.is_dir():
        raise UsageError(f"-o {name}: is not a directory")
    if not target.resolve().parent.is_dir():
        raise UsageError(f"-o {name}: directory {target.resolve().parent} does not exist")
    if target.is_dir() and any(target.iterdir()) and not (target / MARKER).is_file():
        raise UsageError(f"-o {name}: not empty and not a site dtbench publish wrote; name a "
                         "new or empty directory")
    if not os.access(target.resolve().parent, os.W_OK):
        raise UsageError(f"-o {name}: cannot write in {target.resolve().parent}")
    return target


def _replace(built: Path, target: Path) -> None:
    """Put the built site where the old one was: the old one stays until the new is whole."""
    old = None
    if target.is_dir():
        old = Path(tempfile.mkdtemp(prefix=".dtbench-old-", dir=built.parent))
        target.rename(old / "site")
    built.rename(target)
    if old is not None:
        shutil.rmtree(old)


def command(args: argparse.Namespace) -> int:
    from harness.core.errors import EXIT_OK, UsageError
    from harness.core.outputs import clean_text
    from harness.core.secrets import redact, shown_command
    from harness.publish.site import Builder
    from harness.store.sources import catalog_inputs

    target = check_directory(args.output)
    check_default_store(args.paths)
    catalog = catalog_inputs(list(args.paths))
    warned = _warn(catalog.warnings, 0)
    if not catalog.rows:
        raise UsageError(f"no records in {redact(clean_text(' '.join(args.paths)))}")

    def progress(text: str) -> None:
        print(f"dtbench: publish: {clean_text(text)}", file=sys.stderr, flush=True)

    progress(f"{len(catalog.rows)} record(s) -> {args.output}")
    reference = getattr(args, "reference", None)
    regenerate = clean_text(shown_command(["dtbench", "publish", *args.paths, "-o", args.output,
                                           *(["--reference", reference] if reference else [])]),
                            None)
    parent = target.resolve().parent
    try:
        built = Path(tempfile.mkdtemp(prefix=".dtbench-publish-", dir=parent))
    except OSError as exc:
        raise UsageError(f"-o {args.output}: cannot write in {parent} "
                         f"({exc.strerror or exc})") from None
    try:
        site = Builder(catalog, built, regenerate=regenerate, progress=progress,
                       reference=reference).build()
        _warn(catalog.warnings, warned)  # what loading the latest records skipped
        (built / MARKER).write_text("written by dtbench publish; the directory is replaced "
                                    "whole when it publishes again\n", encoding="utf-8")
        built.chmod(0o777 & ~_umask())
        _replace(built, target)
    except OSError as exc:
        raise UsageError(f"-o {args.output}: cannot write the site "
                         f"({exc.strerror or exc})") from None
    finally:
        if built.exists():
            shutil.rmtree(built)
    progress(f"{len(site.files)} file(s): {len(site.machines)} machine(s), "
             f"{len(site.workloads)} workload(s); open {target / 'index.html'}")
    return EXIT_OK


def _warn(warnings: list[str], since: int) -> int:
    """Print the warnings from `since` on; how many there are now."""
    from harness.core.outputs import clean_text

    for warning in warnings[since:]:
        print(f"dtbench: warning: {clean_text(warning)}", file=sys.stderr)
    return len(warnings)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
