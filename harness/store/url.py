"""Store URLs (`postgresql://user@host:port/db`): which targets are servers, which are well
formed, and the password kept out of everything dtbench prints (harness/core/secrets.py).
libpq reads the password from the URL, PGPASSWORD or ~/.pgpass; dtbench only ever shows it as
`***`."""
from __future__ import annotations

import re
from urllib.parse import unquote

from harness.core.errors import UsageError
from harness.core.secrets import MASK, SCHEMES, is_store_url, redact, scrub

__all__ = ["MASK", "SCHEMES", "check_url", "is_store_url", "redact", "scrub"]

# libpq's choices for the parameters whose wrong value it reports only when connecting, which
# would otherwise read as a server that is down
CHOICES = {
    "sslmode": ("disable", "allow", "prefer", "require", "verify-ca", "verify-full"),
    "gssencmode": ("disable", "prefer", "require"),
    "channel_binding": ("disable", "prefer", "require"),
    "target_session_attrs": ("any", "read-write", "read-only", "primary", "standby",
                             "prefer-standby"),
    "load_balance_hosts": ("disable", "random"),
}
_PORT = re.compile(r"[0-9]{1,5}")


def _ports(hosts: str) -> list[str]:
    """The ports of a URL's host list (`h1:5432,[::1]:5433`), as written."""
    ports = []
    for host in hosts.split(","):
        rest = host.rpartition("]")[2] if host.startswith("[") else host
        if ":" in rest:
            ports.append(rest.rpartition(":")[2])
    return ports


def check_url(url: str) -> None:
    """Raise UsageError (exit 2) for a URL libpq would refuse or misread: a password holding an
    unencoded `@ / ? #` (libpq splits at the first `@` and shows the rest as a host name), a
    port out of range, an unknown parameter or a value libpq does not take. The message shows
    the URL masked."""
    shown = redact(url)
    head, _, query = url.partition("?")
    rest = head[head.find("://") + 3:]
    if "@" in rest:
        userinfo = rest[:rest.rindex("@")]
        if any(char in userinfo for char in "@/?#"):
            raise UsageError(f"store {shown}: the user or password holds an unencoded @, /, ? "
                             "or #: percent-encode it (@ is %40), or give the password in "
                             "PGPASSWORD or ~/.pgpass")
        rest = rest[rest.rindex("@") + 1:]
    for port in _ports(rest.partition("/")[0]):
        if port and not (_PORT.fullmatch(port) and 0 < int(port) < 65536):
            raise UsageError(f"store {shown}: port {scrub(port, url)!r} is not a number from "
                             "1 to 65535")
    for part in filter(None, query.split("&")):
        key, _, value = part.partition("=")
        allowed = CHOICES.get(key.strip().lower())
        if allowed is not None and unquote(value) not in allowed:
            raise UsageError(f"store {shown}: {key}={scrub(value, url)!r} is not one of "
                             f"{', '.join(allowed)}")
