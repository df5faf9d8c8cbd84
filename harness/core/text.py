"""Text for people: byte counts, message sizes, one-line messages and plain-text tables."""
from __future__ import annotations

_BINARY = ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"))


def human_bytes(value: float | None) -> str:
    """Bytes in the binary unit that fits, two decimals: 23.54 GiB ("-" for None)."""
    if value is None:
        return "-"
    for factor, label in _BINARY:
        if abs(value) >= factor:
            return f"{value / factor:.2f} {label}"
    return f"{value:.0f} B"


def size_label(size: float, compact: bool = False) -> str:
    """A message size as nccl-tests readers know it: 64 MiB, or 64M when compact; sizes that
    are no whole multiple of a binary unit stay in bytes."""
    for factor, label in _BINARY:
        if size >= factor and size % factor == 0:
            return f"{size / factor:.0f}{label[0] if compact else ' ' + label}"
    return f"{size:.0f}" if compact else f"{size:.0f} B"


def one_line(text: str, limit: int = 500) -> str:
    """White space folded to single spaces, cut with an ellipsis past `limit` characters."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def render_table(header: tuple[str, ...] | list[str], rows: list[list[str]]) -> str:
    """Columns padded to their widest cell, a dashed rule under the header."""
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows, strict=True)]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(header, widths, strict=True)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(line.rstrip() for line in lines)
