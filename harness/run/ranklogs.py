"""What the ranks printed: each launcher process's output goes to launcher-I.log in the run
directory (one per rank under the local launcher; one for every rank under torchrun, mpirun
and srun). The directory is removed after the run, so a failure keeps what it needs from
these logs: the last error line for a one-line reason, the failing rank's traceback tail for
the record's notes."""
from __future__ import annotations

import re
from pathlib import Path


def _logs(run_dir: Path) -> list[Path]:
    """launcher-I.log in the order the processes were started."""
    return sorted(run_dir.glob("launcher-*.log"),
                  key=lambda path: int(re.sub(r"\D", "", path.name) or 0))


def last_error_line(run_dir: Path) -> str:
    """The last line mentioning an error in any log (else the last line), shortened."""
    lines: list[str] = []
    for path in _logs(run_dir):
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


def traceback_tail(run_dir: Path, ranks: list[int | None], failure: str,
                   lines: int = 8) -> list[str]:
    """The end of the traceback of the rank `failure` names ("rank N: ..."), else of the first
    log that has one. `ranks[i]` is the rank launcher-i.log belongs to (None: a launcher
    that starts several); torchrun prefixes every line of rank N with "[rankN]:"."""
    named = re.match(r"rank (\d+)", failure)
    rank = int(named.group(1)) if named else None
    order = sorted(range(len(ranks)), key=lambda index: ranks[index] != rank)
    prefix = f"[rank{rank}]:"
    for index in order:
        try:
            text = (run_dir / f"launcher-{index}.log").read_text(errors="replace").splitlines()
        except OSError:
            continue
        own = [line[len(prefix):] for line in text if line.startswith(prefix)]
        for candidate in (own, text):
            block = first_traceback(candidate)
            if block:
                return [line.rstrip()[:300] for line in block[-lines:]]
    return []
