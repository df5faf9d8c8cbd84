"""What the ranks printed: each process the supervisor starts writes to its own launcher log
in the run directory (one per rank under the local launcher; one for every rank under
torchrun, mpirun and srun). The directory is removed after the run, so a failure keeps what
it needs from these logs: the last error line for a one-line reason, the failing rank's
traceback tail for the record's notes."""
from __future__ import annotations

import re

from backends.base import Launcher
from harness.rundir import RunDir


def last_error_line(run_dir: RunDir) -> str:
    """The last line mentioning an error in any log (else the last line), shortened."""
    lines: list[str] = []
    for path in run_dir.launcher_logs():
        try:
            lines += [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            continue
    errors = [ln for ln in lines if "Error" in ln or "error" in ln]
    return (errors or lines or [""])[-1].strip()[:300]


def first_traceback(lines: list[str]) -> list[str]:
    """The first Python traceback in `lines`, down to its exception line ([] if none)."""
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback")]
    if not starts:
        return []
    block = lines[starts[0]:]
    end = next((i + 1 for i, line in enumerate(block[1:], 1)
                if line and not line.startswith(" ")), len(block))
    return block[:end]


def traceback_tail(run_dir: RunDir, launcher: Launcher, ranks: list[int | None], failure: str,
                   lines: int = 8) -> list[str]:
    """The end of the traceback of the rank `failure` names ("rank N: ..."), else of the first
    log that has one. `ranks[i]` is the rank whose output the i-th launcher log holds (None:
    a launcher that starts several, whose own marks tell the ranks' lines apart)."""
    named = re.match(r"rank (\d+)", failure)
    rank = int(named.group(1)) if named else None
    order = sorted(range(len(ranks)), key=lambda index: ranks[index] != rank)
    for index in order:
        try:
            text = run_dir.launcher_log(index).read_text(errors="replace").splitlines()
        except OSError:
            continue
        own = launcher.rank_lines(text, rank) if rank is not None else []
        for candidate in (own, text):
            block = first_traceback(candidate)
            if block:
                return [line.rstrip()[:300] for line in block[-lines:]]
    return []
