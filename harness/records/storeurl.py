"""Store URLs (`postgresql://user@host:port/db`): which targets are servers, and the password
kept out of everything dtbench prints. libpq reads the password from the URL, PGPASSWORD or
~/.pgpass; dtbench only ever shows it as `***`."""
from __future__ import annotations

import re
from urllib.parse import quote, unquote, urlsplit

SCHEMES = ("postgresql://", "postgres://")
MASK = "***"
# A password in a URL's user part, or as a `password=` parameter (URL query or key=value DSN).
_USERINFO = re.compile(r"(postgres(?:ql)?://[^:/@\s]*):([^@\s]*)@", re.IGNORECASE)
_PARAMETER = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]+)", re.IGNORECASE)


def is_store_url(target: object) -> bool:
    """A PostgreSQL URL (case-insensitive scheme); anything else names a directory."""
    return isinstance(target, str) and target.lower().startswith(SCHEMES)


def _password(url: str) -> str | None:
    try:
        return urlsplit(url).password
    except ValueError:
        return None


def redact(url: str) -> str:
    """The URL with its password, if any, replaced by `***`."""
    return scrub(url, url)


def scrub(text: str, url: str | None = None) -> str:
    """`text` with every form of `url`'s password (as written, decoded, encoded) and any
    password in a URL or `password=` parameter replaced by `***`: for error messages of
    libpq and psycopg, which may echo the connection string."""
    text = _USERINFO.sub(rf"\1:{MASK}@", text)
    text = _PARAMETER.sub(rf"\1{MASK}", text)
    if url:
        raw = _USERINFO.search(url)
        forms = {raw.group(2)} if raw else set()
        secret = _password(url)
        if secret:
            forms |= {secret, unquote(secret), quote(secret, safe="")}
        for form in sorted((f for f in forms if f and f != MASK), key=len, reverse=True):
            text = text.replace(form, MASK)
    return text
