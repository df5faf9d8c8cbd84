"""Text a record contributes, made safe for where it is written: one filter per medium.

A record, a store's index or a server's row is input from whoever made it (a colleague's folder,
a CI artifact, a server every runner writes), so its text is never written as it came:

- terminal: escape sequences (CSI, OSC, ...) removed, every other control or format
  character (NUL, ESC, bidi overrides, line breaks) a space;
- Markdown: the terminal's text, escaped so that it renders literally: no HTML, emphasis or
  table-cell break, and no link or image (`[x](y)`, `![x](y)`, `<https://...>`, and the bare
  `https://`, `www.` and `a@b` GitHub links on its own);
- CSV: the terminal's text, with a leading `= + - @` (a formula) made text with a `'`;
- HTML: the terminal's text, escaped (the report's pages also forbid scripts by CSP).

Each cuts a field to FIELD_LIMIT characters (or the limit the caller states) with an ellipsis.

And where `--json` writes, the same for every command: a file, or stdout for `-` (json_output).
"""
from __future__ import annotations

import json
import re
import sys
import unicodedata
from collections.abc import Callable, Iterable
from html import escape
from pathlib import Path
from typing import Any, TextIO

FIELD_LIMIT = 500
_UNSAFE_CATEGORIES = {"Cc", "Cf", "Zl", "Zp"}
# ECMA-48 sequences: CSI (ESC [ or 0x9B ... final byte), OSC/DCS/PM/APC/SOS strings (ended by
# BEL or ST), and two-character escapes. What is left of one is only printable text.
_ESCAPES = re.compile(r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"
                      r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
                      r"|\x1b[ -/]*[0-~]?")
# Backslash first, so the escapes added after it are not escaped again.
_BACKSLASHED = "\\`*_[]|~$"
_ENTITIES = (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"))
# What GitHub turns into links without any markup: a scheme's `://`, `www.`, an address's `@`.
_AUTOLINKS = (("://", "&#58;//"), ("www.", "www&#46;"), ("WWW.", "WWW&#46;"), ("@", "&#64;"))
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
# What a terminal must not be sent, line breaks and tabs apart: C0 and C1 controls, DEL, and
# the format characters that reorder or hide text (bidi overrides, zero-width marks).
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\xad\u061c\u180e\u200b-\u200f"
                       "\u2028-\u202e\u2060-\u206f\ufeff\ufff9-\ufffb\U000e0000-\U000e007f]")


def _cut(text: str, limit: int | None) -> str:
    return text if limit is None or len(text) <= limit else text[: limit - 1] + "…"


def clean_text(value: Any, limit: int | None = FIELD_LIMIT) -> str:
    """`value` as one line of printable text for a terminal: escape sequences removed, other
    control and format characters (NUL, ESC, bidi overrides, line breaks) spaces, lone
    surrogates U+FFFD, white space folded, cut past `limit` characters."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else str(value)
    if limit is not None:
        text = text[: limit * 4]
    if not text.isprintable():  # printable text has no character of those categories
        text = _ESCAPES.sub("", text)
        chars = []
        for char in text:
            category = unicodedata.category(char)
            if category in _UNSAFE_CATEGORIES:
                char = " "
            elif category == "Cs":
                char = "\ufffd"
            chars.append(char)
        text = "".join(chars)
    return _cut(" ".join(text.split()), limit)


def terminal_text(text: str, line_limit: int | None = None) -> str:
    """A block of lines for a terminal: each line as clean_text leaves it (its indentation
    kept), the line breaks kept."""
    lines = []
    for line in str(text).split("\n"):
        stripped = line.lstrip(" ")
        indent = line[: len(line) - len(stripped)] if stripped else ""
        lines.append(indent + clean_text(stripped, line_limit) if stripped.strip() else "")
    return "\n".join(lines)


def terminal_stream_text(text: str) -> str:
    """Text bound for a terminal as it is written (harness/commands/cli wraps the streams of
    the commands that show records in a TerminalStream): escape sequences removed, every
    other control or format character dropped; line breaks and tabs kept."""
    if text.isprintable():
        return text
    return _CONTROLS.sub("", _ESCAPES.sub("", text))


def markdown_text(value: Any, limit: int | None = FIELD_LIMIT) -> str:
    """Text that renders literally in Markdown, a table cell included: no HTML, no emphasis, no
    link, image or autolink, no cell break. `<` and `>` become entities, so a hostile
    `<img>` never reaches the page."""
    text = clean_text(value, limit)
    for char, entity in _ENTITIES:
        text = text.replace(char, entity)
    for char in _BACKSLASHED:
        text = text.replace(char, "\\" + char)
    for found, neutral in _AUTOLINKS:
        text = text.replace(found, neutral)
    return text


def csv_text(value: Any, limit: int | None = FIELD_LIMIT) -> str:
    """Clean text that a spreadsheet shows as text, never evaluates as a formula (a number,
    such as -1.5, stays a number)."""
    text = clean_text(value, limit)
    if text[:1] in _FORMULA_STARTS and text != "-" and not _is_number(text):
        return "'" + text
    return text


def html_text(value: Any, limit: int | None = FIELD_LIMIT) -> str:
    """Clean text escaped for HTML element content and attribute values."""
    return escape(clean_text(value, limit), quote=True)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class FilteredStream:
    """A text stream that writes `change(text)` of what it is given; its `buffer` (the bytes
    side, where report writes UTF-8) does the same."""

    def __init__(self, stream: TextIO, change: Callable[[str], str]) -> None:
        self._stream = stream
        self._change = change
        raw = getattr(stream, "buffer", None)
        self.buffer = _FilteredBuffer(raw, change) if raw is not None else None

    def write(self, text: str) -> int:
        self._stream.write(self._change(text))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class _FilteredBuffer:
    def __init__(self, raw: Any, change: Callable[[str], str]) -> None:
        self._raw = raw
        self._change = change

    def write(self, data: bytes) -> int:
        text = bytes(data).decode("utf-8", "surrogateescape")
        self._raw.write(self._change(text).encode("utf-8", "surrogateescape"))
        return len(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


def terminal_stream(stream: TextIO) -> FilteredStream:
    """`stream` passing only what terminal_stream_text lets through."""
    return FilteredStream(stream, terminal_stream_text)


JSON_STDOUT = "-"


def json_output(given: str | None, stdout: TextIO | None = None) -> Path | TextIO | None:
    """Where `--json` writes, checked before any work: None without it, `stdout` (the real one,
    where the command's text was moved to stderr) for `-`, else a file in a writable folder."""
    from harness.core.files import check_output_file

    if given is None:
        return None
    if given == JSON_STDOUT:
        return stdout or sys.stdout
    return check_output_file(given, "--json")


def write_json(target: Path | TextIO | None, data: Any, **dumps: Any) -> None:
    """`data` as JSON, indented one space, to a --json target (a file replaced atomically)."""
    if target is None:
        return
    from harness.core.files import write_atomic

    text = json.dumps(data, indent=1, **dumps) + "\n"
    if isinstance(target, Path):
        write_atomic(target, text)
    else:
        target.write(text)
        target.flush()
