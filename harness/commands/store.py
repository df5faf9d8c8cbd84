"""`dtbench store export URL --out DIR` and `dtbench store import DIR --to URL`: copy records
between a PostgreSQL store and a directory store. Both skip records the target already holds
(by run_id), so either may be run again after an interruption; nothing is replaced."""
from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from harness.commands.options import Parser, RenamedOption, add_store_option
from harness.core.errors import EXIT_FAILED, EXIT_OK, UsageError
from harness.core.outputs import clean_text

if TYPE_CHECKING:
    from harness.store.postgres import PostgresStore


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=Parser,
                                    help="what to do (ACTION -h for its options)")
    actions.required = True
    export_help = "copy a server's records into a directory store"
    export = actions.add_parser("export", help=export_help,
                                description=f"dtbench store export: {export_help}.")
    export.add_argument("url", metavar="URL", help="postgresql://USER@HOST:PORT/DB")
    add_store_option(export)
    export.add_argument("-o", "--output", dest="out", metavar="DIR", action=RenamedOption,
                        renamed_to="--out")
    import_help = "push a directory's records to a server"
    imports = actions.add_parser("import", help=import_help,
                                 description=f"dtbench store import: {import_help}.")
    imports.add_argument("directory", metavar="DIR",
                         help="a directory store (such as ./dtbench-pending) or record files")
    imports.add_argument("--to", required=True, metavar="URL", dest="url",
                         help="postgresql://USER@HOST:PORT/DB")


def _server(url: str) -> PostgresStore:
    from harness.store.postgres import PostgresStore
    from harness.store.url import is_store_url, redact

    if not is_store_url(url):
        raise UsageError(f"{redact(url)}: not a store URL (postgresql://USER@HOST:PORT/DB)")
    return PostgresStore(url)


def _warn(message: str) -> None:
    print(f"dtbench: warning: {clean_text(message, 1000)}", file=sys.stderr)


def export(args: argparse.Namespace) -> int:
    """The server's valid records into a directory store, each under its run id (the schema
    keeps run ids to letters, digits and . _ -: a file name inside the target folder)."""
    from harness.records.record import write_violation
    from harness.store.directory import Store
    from harness.store.url import is_store_url, redact

    server = _server(args.url)
    if is_store_url(args.out):
        raise UsageError(f"--out {redact(args.out)}: name a directory (export copies a "
                         "server into a directory store)")
    target = Store(args.out)
    target.ensure_writable()
    present = {record["run_id"] for record in target.records()}
    warnings: list[str] = []
    added = skipped = 0
    for record in server.records(warnings):
        if record["run_id"] in present:
            skipped += 1
            continue
        problem = write_violation(record)
        if problem is not None:
            warnings.append(f"skipped {server.shown} run {record['run_id']}: {problem}")
            continue
        target.add(record)
        present.add(record["run_id"])
        added += 1
    for warning in warnings:
        _warn(warning)
    print(f"exported {added} record(s) to {clean_text(target.root, None)}, skipped {skipped} "
          "already there")
    return EXIT_OK


def import_(args: argparse.Namespace) -> int:
    """Records of files and directory stores onto the server; exit 2 when none of them is a
    record a store keeps (nothing to push is a mistake worth saying so)."""
    from harness.records.record import write_violation
    from harness.store.sources import load_inputs

    server = _server(args.url)
    loaded = load_inputs([args.directory])
    writable = []
    for record in loaded.records:
        problem = write_violation(record)
        if problem is None:
            writable.append(record)
        else:
            loaded.warnings.append(f"skipped run {record['run_id']}: {problem}")
    for warning in loaded.warnings:
        _warn(warning)
    if not writable:
        raise UsageError(f"{args.directory}: no record to import"
                         + (f" ({len(loaded.warnings)} skipped)" if loaded.warnings else ""))
    added, skipped = server.add_new(writable)
    print(f"imported {added} record(s) into {server.shown}, "
          f"skipped {skipped} already there")
    return EXIT_OK


def command(args: argparse.Namespace) -> int:
    from harness.store.postgres import StoreError, StoreUnreachable

    try:
        return export(args) if args.action == "export" else import_(args)
    except (StoreUnreachable, StoreError) as exc:
        print(f"dtbench: error: {clean_text(exc, 2000)}; nothing stored is lost: run the "
              "command again", file=sys.stderr)
        return EXIT_FAILED
