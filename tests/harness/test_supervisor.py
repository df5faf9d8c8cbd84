"""Reading torchrun's failure report: which rank caused a failed run."""
from __future__ import annotations

import signal

from harness.supervisor import killed_by_cause, torchrun_root_cause

RULE = "-" * 55


def entry(index: int, rank: int, code: int, note: str = "") -> str:
    return (f"[{index}]:\n  time      : 2026-11-22_02:34:43\n  host      : localhost\n"
            f"  rank      : {rank} (local_rank: {rank})\n"
            f"  exitcode  : {code} (pid: {27555 + rank}){note}\n  error_file: <N/A>\n")


def report(root: str, others: list[str]) -> str:
    """torchrun's report as it prints it: the other failures first, then the root cause."""
    failures = "\n".join(others) if others else "  <NO_OTHER_FAILURES>\n"
    return (f"E1122 some earlier line about rank 7 exitcode 3\n{RULE}\nw.py FAILED\n{RULE}\n"
            f"Failures:\n{failures}{RULE}\nRoot Cause (first observed failure):\n{root}"
            f"{'=' * 55}\n")


def test_no_report_yet() -> None:
    assert torchrun_root_cause("") is None
    assert torchrun_root_cause("W1122 torchrun starting 2 processes\n") is None


def test_root_cause_alone() -> None:
    assert torchrun_root_cause(report(entry(0, 1, 1), [])) == (1, 1)


def test_killed_root_cause_and_the_ranks_torchrun_stopped() -> None:
    """The usual case, as torchrun 2.13 printed it for a SIGKILLed rank 1."""
    text = report(entry(0, 1, -9, "  (SIGKILL)"), [entry(1, 0, -15, "  (SIGTERM)")])
    assert torchrun_root_cause(text) == (1, -9)


def test_a_killed_rank_outranks_a_peer_that_reported_first() -> None:
    """The race seen in CI: rank 0 failed on the broken connection and wrote its error file
    before torchrun noticed that rank 1 had been killed, so torchrun named rank 0."""
    text = report(entry(0, 0, 1), [entry(1, 1, -9, "  (SIGKILL)")])
    assert torchrun_root_cause(text) == (1, -9)


def test_sigterm_from_torchrun_is_not_a_cause() -> None:
    text = report(entry(0, 0, 1), [entry(1, 1, -15, "  (SIGTERM)")])
    assert torchrun_root_cause(text) == (0, 1)


def test_a_rank_that_exited_with_an_error_outranks_an_aborted_peer() -> None:
    """gloo aborts (SIGABRT) a rank whose peer vanished mid-collective: the peer that exited
    with its own error (out of memory, say) is the cause, whichever torchrun saw first."""
    aborted = entry(0, 0, -6, "  (SIGABRT)")
    assert torchrun_root_cause(report(aborted, [entry(1, 1, 1)])) == (1, 1)
    assert torchrun_root_cause(report(entry(0, 1, 1), [entry(1, 0, -6)])) == (1, 1)


def test_an_abort_alone_is_still_the_cause() -> None:
    assert torchrun_root_cause(report(entry(0, 1, -6, "  (SIGABRT)"), [])) == (1, -6)


def test_signal_classes() -> None:
    assert killed_by_cause(-signal.SIGKILL) and killed_by_cause(-signal.SIGSEGV)
    assert not killed_by_cause(-signal.SIGABRT) and not killed_by_cause(-signal.SIGTERM)
    assert not killed_by_cause(1) and not killed_by_cause(0)
