"""The output filters (harness/core/outputs.py), the password masking (secrets.py) and the
bounded reads and contained writes (files.py) every command's safety rests on."""
from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from harness.core.files import RefusedFile, folder_under, read_regular
from harness.core.outputs import (
    FIELD_LIMIT,
    clean_text,
    csv_text,
    html_text,
    markdown_text,
    terminal_stream,
    terminal_text,
)
from harness.core.secrets import mask, masked_stream, redact, secrets_in, shown_command

PASSWORD = "S3cr-et!pw"


@pytest.mark.parametrize("sequence", ["\x1b[31m", "\x1b[2J", "\x1b]8;;https://x\x07",
                                      "\x1b]0;title\x1b\\", "\x9b31m", "\x1bc", "\x07",
                                      "\u202e", "\u200b", "\x00"])
def test_no_escape_sequence_or_control_character_reaches_a_terminal(sequence: str) -> None:
    text = f"a{sequence}b"
    for shown in (clean_text(text), terminal_text(text + "\nc")):
        assert not any(ord(c) < 32 and c != "\n" or 0x7f <= ord(c) <= 0x9f or c in
                       "\u202e\u200b" for c in shown), repr(shown)
        assert shown.startswith("a") and "b" in shown


def test_fields_are_cut_at_the_stated_length() -> None:
    assert len(clean_text("x" * 2**20)) == FIELD_LIMIT
    assert clean_text("x" * 50, 10) == "x" * 9 + "…"
    assert len(markdown_text("y" * 2**20)) == FIELD_LIMIT


@pytest.mark.parametrize("payload", [
    "[a](https://evil.example)", "![i](https://evil.example/p.png)",
    "<img src=https://evil.example/p.png>", "<https://evil.example>", "https://evil.example",
    "www.evil.example", "user@evil.example", "[ref]: https://evil.example"])
def test_markdown_has_no_live_link_or_image(payload: str) -> None:
    shown = markdown_text(payload)
    assert "://" not in shown and "<" not in shown and "www." not in shown and "@" not in shown
    assert "[" not in shown.replace("\\[", "")
    try:
        from markdown_it import MarkdownIt
    except ImportError:
        return
    html = MarkdownIt("commonmark").render(shown)
    assert "<a " not in html and "<img" not in html


def test_csv_neutralises_formulas_but_keeps_numbers() -> None:
    for formula in ("=1+1", "+cmd", "@SUM(A1)", "-2+3", "\t=1", "\r=1"):
        assert csv_text(formula).startswith("'"), formula
    assert csv_text("-1.5") == "-1.5" and csv_text("-") == "-" and csv_text("x") == "x"


def test_html_escapes() -> None:
    assert html_text('<b a="x">&') == "&lt;b a=&quot;x&quot;&gt;&amp;"


def test_a_terminal_stream_drops_controls_but_keeps_lines() -> None:
    sink = io.StringIO()
    stream = terminal_stream(sink)
    print("one\x1b[31m red\ttab", file=stream)
    assert sink.getvalue() == "one red\ttab\n"


@pytest.mark.parametrize("url", [
    f"postgresql://u:{PASSWORD}@h/db", f"postgres://u:{PASSWORD.replace('!', '%21')}@h:5/db",
    f"POSTGRESQL://u:a@{PASSWORD}@h/db", f"postgresql://u@h/db?password={PASSWORD}",
    f"postgresql://u@h/db?sslmode=require&password='{PASSWORD}'"])
def test_every_form_of_a_password_is_masked(url: str) -> None:
    secrets = secrets_in(["report", f"--out={url}"])
    messages = [url, f"invalid choice: '{url}'", f'failed to resolve host "{PASSWORD}@h"',
                f"unexpected spaces found in \"'{PASSWORD}'\"", redact(url),
                shown_command(["dtbench", "report", url])]
    for message in messages:
        assert PASSWORD not in mask(message, secrets), message
    assert PASSWORD not in redact(url) and "***" in redact(url)


def test_a_masked_stream_masks_text_and_bytes() -> None:
    url = f"postgresql://u:{PASSWORD}@h/db"

    class Sink(io.StringIO):
        buffer = io.BytesIO()

    sink = Sink()
    stream = masked_stream(sink, secrets_in([url]))
    print(f"no records in {url}; {PASSWORD}", file=stream)
    assert stream.buffer is not None
    stream.buffer.write(url.encode())
    assert PASSWORD not in sink.getvalue() + Sink.buffer.getvalue().decode()


def test_read_regular_refuses_what_is_no_bounded_regular_file(tmp_path: Path) -> None:
    with pytest.raises(RefusedFile, match="a device"):
        read_regular("/dev/zero", 100)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(RefusedFile, match="a FIFO"):
        read_regular(tmp_path / "fifo", 100)  # refused before open: no wait for a writer
    with pytest.raises(RefusedFile, match="a directory"):
        read_regular(tmp_path, 100)
    (tmp_path / "big").write_bytes(b"x" * 101)
    with pytest.raises(RefusedFile, match="exceeds the 100-byte limit"):
        read_regular(tmp_path / "big", 100)
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "out").symlink_to(tmp_path / "big")
    with pytest.raises(RefusedFile, match="a link to outside"):
        read_regular(tmp_path / "store" / "out", 1000, tmp_path / "store")
    data, status = read_regular(tmp_path / "store" / "out", 1000)  # asked for by name
    assert data == b"x" * 101 and status.st_size == 101


def test_folder_under_stays_under_its_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    assert folder_under(root, "a/b") == root / "a" / "b" and (root / "a" / "b").is_dir()
    for escaping in ("../x", "/abs", "a/../../x", "a/.."):
        with pytest.raises(RefusedFile):
            folder_under(root, escaping)
    (root / "link").symlink_to(tmp_path)
    with pytest.raises(RefusedFile, match="symbolic link"):
        folder_under(root, "link/x")
    assert not (tmp_path / "x").exists()
