"""--profile's traces, kept beside the record: <store>/traces/<run id>/rank<N>.trace.json.gz,
named in the record's notes (paths relative to the store's root)."""
from __future__ import annotations

import base64
import os

from harness.core.files import folder_under
from harness.rundir import RankResult
from harness.store.contract import RunStore


def keep_traces(store: RunStore, run_id: str, ranks: list[RankResult]) -> list[str]:
    """Write each rank's trace (gzipped Chrome JSON) under the store; their relative paths."""
    found = [(rank.rank, rank.trace) for rank in ranks if rank.trace]
    if not found:
        return []
    folder = folder_under(store.root, f"traces/{run_id}")  # no link out of the store
    kept = []
    for number, encoded in found:
        path = folder / f"rank{number}.trace.json.gz"
        partial = path.with_suffix(".partial")
        partial.write_bytes(base64.b64decode(encoded))
        os.replace(partial, path)
        kept.append(str(path.relative_to(store.root)))
    return kept
