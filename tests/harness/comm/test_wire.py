"""What the server protocols share (harness/comm/wire.py), without a process group: the two
headers' layouts and sizes (the control bytes the records count), tags that never collide,
the receiving thread and the lost-worker watch."""
from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

from harness.comm import paramserver, sandblaster
from harness.comm.wire import LOST_DIR_VAR, Header, arrivals, lost_workers, watching_lost
from harness.rundir import LostWorker, RunDir


def test_each_protocols_header_keeps_its_layout_and_size() -> None:
    ps = paramserver.HEADER.pack(paramserver.FETCH, 7, 3, 5)
    assert ps.dtype == torch.int64 and ps.tolist() == [2, 7, 3, 5]
    assert paramserver.HEADER.pack(9).tolist() == [9, 0, 0, 0]
    sb = sandblaster.header(sandblaster.ASSIGN, 4, -1, alpha=0.25)
    assert sb.dtype == torch.float64 and sb.tolist() == [302.0, 4.0, -1.0, 0, 0, 0, 0, 0.25]
    # the control bytes a record counts per header (volumes and predict price them)
    assert (paramserver.HEADER_BYTES, sandblaster.HEADER_BYTES) == (32, 64)
    assert Header(3, torch.float32).nbytes == 12 and Header(3, torch.float32).empty().numel() == 3


def test_no_two_tags_of_the_two_protocols_are_the_same() -> None:
    tags = [*vars(paramserver.TAGS).values(), paramserver.TAG_PLAN,
            *vars(sandblaster.TAGS).values(), sandblaster.TAG_RESULT, sandblaster.TAG_COORD,
            sandblaster.TAG_ANSWER]
    assert len(tags) == len(set(tags)) == 12


def test_arrivals_yield_messages_then_none_while_waiting_and_stop_after_the_last() -> None:
    sent = iter([(1, [1.0]), (2, [sandblaster.QUIT]), (3, [1.0])])
    calls = []

    def receive() -> tuple[int, list[float]]:
        calls.append(threading.current_thread().name)
        return next(sent)

    received = arrivals(receive, timeout=lambda: 0.05, last=sandblaster.is_quit, name="probe")
    assert [next(received), next(received)] == [(1, [1.0]), (2, [sandblaster.QUIT])]
    assert next(received) is None  # nothing more: the thread stopped after QUIT
    assert calls == ["probe", "probe"]


def test_a_receive_error_is_raised_where_the_messages_are_read() -> None:
    def receive() -> None:
        raise RuntimeError("connection reset")

    with pytest.raises(RuntimeError, match="connection reset"):
        next(arrivals(receive, timeout=lambda: 1.0))


def test_lost_workers_are_read_from_the_run_directory_where_the_run_tolerates_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(LOST_DIR_VAR, raising=False)
    assert not watching_lost() and lost_workers() == {}
    lost = LostWorker(rank=2, role="worker", time=1.0, steps=3, phase="forward", reason="killed")
    RunDir(tmp_path).write_lost(lost)
    monkeypatch.setenv(LOST_DIR_VAR, str(tmp_path))
    assert watching_lost() and lost_workers() == {2: lost}
