"""Reading the ranks' logs after a failure: the named rank's traceback, not a peer's."""
from __future__ import annotations

from pathlib import Path

from backends.launchers import LocalLauncher, TorchrunLauncher
from harness.run.ranklogs import first_traceback, last_error_line, traceback_tail
from harness.rundir import RunDir

OWN = ["Traceback (most recent call last):", '  File "loops.py", line 9, in step',
       "    inject_fault(rank, step)", "RuntimeError: injected fault at step 2"]
PEER = ["Traceback (most recent call last):", '  File "ddp.py", line 3, in backward',
        "    reducer.run()", "RuntimeError: Connection closed by peer"]
LOCAL = LocalLauncher()


def test_the_named_ranks_traceback_outranks_an_earlier_peers(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path)
    run_dir.launcher_log(0).write_text("\n".join(["progress 1/3", *PEER, "bye"]))
    run_dir.launcher_log(1).write_text("\n".join(["progress 1/3", *OWN]))
    assert traceback_tail(run_dir, LOCAL, [0, 1], "rank 1: RuntimeError: injected") == OWN
    # no rank named: the first log that has one
    assert traceback_tail(run_dir, LOCAL, [0, 1], "no rank started within 120 s") == PEER
    assert traceback_tail(run_dir, LOCAL, [0, 1], "rank 1: x", lines=2) == OWN[-2:]


def test_one_log_for_every_rank_picks_the_named_ranks_marked_lines(tmp_path: Path) -> None:
    """torchrun writes every rank into one log, each line prefixed "[rankN]:"."""
    run_dir = RunDir(tmp_path)
    mixed = [f"[rank0]:{line}" for line in PEER] + [f"[rank1]:{line}" for line in OWN]
    run_dir.launcher_log(0).write_text("\n".join(mixed))
    assert traceback_tail(run_dir, TorchrunLauncher(), [None], "rank 1 killed by SIGKILL") == OWN


def test_nothing_to_read_is_an_empty_tail(tmp_path: Path) -> None:
    run_dir = RunDir(tmp_path)
    assert traceback_tail(run_dir, LOCAL, [0, 1], "rank 1: gone") == []
    run_dir.launcher_log(0).write_text("no traceback here\n")
    assert traceback_tail(run_dir, LOCAL, [0], "rank 0: x") == []
    assert first_traceback(["a", "b"]) == []
    assert last_error_line(run_dir) == "no traceback here"
