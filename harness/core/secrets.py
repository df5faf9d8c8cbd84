"""Passwords kept out of everything dtbench prints or writes.

A store URL (`postgresql://USER:PASSWORD@HOST/DB?password=...`) may carry a password. Wherever
a URL is echoed (a usage error, argparse's own "invalid choice", a "Regenerate with" line, a
page footer, libpq's messages), it is shown with `***` in its place: `mask` replaces every
form of the passwords given on the command line (as written, percent-decoded and encoded,
unquoted, and the pieces libpq shows when it splits a URL at an unencoded `@`), and any
password in URL or `password=` syntax. Forms shorter than MIN_SECRET characters are masked
only where that syntax shows them: replacing every `a` of a message would say more than it
hides.
"""
from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from typing import Any, TextIO
from urllib.parse import quote, unquote

from harness.core.outputs import FilteredStream

SCHEMES = ("postgresql://", "postgres://")
MASK = "***"
MIN_SECRET = 3
# The user part's password runs to the last `@` of a word (an unencoded `@` in it included).
_USERINFO = re.compile(r"(postgres(?:ql)?://[^:/@\s'\"]*):(\S*)@", re.IGNORECASE)
_PARAMETER = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\"[^\"]*\"|[^\s&'\"]+)",
                        re.IGNORECASE)
_SCHEME = re.compile(r"postgres(?:ql)?://", re.IGNORECASE)
_PIECES = re.compile(r"[@/?#:&\s'\"]")


def is_store_url(target: object) -> bool:
    """A PostgreSQL URL (case-insensitive scheme); anything else names a directory."""
    return isinstance(target, str) and target.lower().startswith(SCHEMES)


def _written(url: str) -> set[str]:
    """The password of a URL as written: the user part's (to the last `@` before the query)
    and every `password=` parameter's."""
    found = set()
    head, _, query = url.partition("?")
    start = head.find("://") + 3
    if "@" in head[start:]:
        _, colon, secret = head[start:head.rindex("@")].partition(":")
        if colon and secret:
            found.add(secret)
    for part in query.split("&"):
        key, equals, value = part.partition("=")
        if equals and unquote(key).strip().lower() == "password" and value:
            found.add(value)
    return found


def passwords(url: str) -> set[str]:
    """Every form of `url`'s passwords that a message might show."""
    forms: set[str] = set()
    for secret in _written(url):
        decoded = unquote(secret)
        for form in (secret, decoded, quote(decoded, safe=""), secret.strip("'\""),
                     decoded.strip("'\"")):
            forms.add(form)
            forms.update(_PIECES.split(form))
    return {form for form in forms if len(form) >= MIN_SECRET and form != MASK}


def secrets_in(words: Iterable[Any]) -> set[str]:
    """The password forms of every store URL inside `words` (a command line: `--out=URL` and
    a URL in a comma list count too)."""
    found: set[str] = set()
    for word in words:
        text = str(word)
        for match in _SCHEME.finditer(text):
            found |= passwords(text[match.start():])
    return found


def mask(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with every password in URL or `password=` syntax, and every one of `secrets`,
    shown as `***`."""
    text = _USERINFO.sub(rf"\1:{MASK}@", text)
    text = _PARAMETER.sub(rf"\1{MASK}", text)
    for secret in sorted(set(secrets), key=len, reverse=True):
        if len(secret) >= MIN_SECRET:
            text = text.replace(secret, MASK)
    return text


def scrub(text: str, url: str | None = None) -> str:
    """`text` (an error message of libpq or psycopg, which may echo the connection string)
    with `url`'s passwords and any password in URL syntax replaced by `***`."""
    return mask(text, passwords(url) if url else ())


def redact(url: str) -> str:
    """The URL with its password, if any, replaced by `***`."""
    return scrub(url, url)


def shown_command(words: list[str]) -> str:
    """A command line as a page or report shows it ("Regenerate with"): quoted for a shell,
    passwords masked."""
    return mask(shlex.join(words), secrets_in(words))


def masked_stream(stream: TextIO, secrets: Iterable[str]) -> FilteredStream:
    """`stream` masking `secrets` (and any password in URL syntax) in what is written to it:
    the command line wraps stdout and stderr in one, so that no message or warning shows a
    password given on the command line."""
    known = frozenset(secrets)
    return FilteredStream(stream, lambda text: mask(text, known))
