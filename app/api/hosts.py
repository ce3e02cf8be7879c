"""Where a request says it is going: its Host, and whether a page's Origin is this service's own.

A browser names the page a request comes from in `Origin` and cannot forge it, nor the
`Sec-Fetch-*` headers; a client that is not a browser sends neither, or whatever it likes,
but then it has no one else's credentials to replay.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit

from starlette.types import Scope

DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def header(headers: Sequence[tuple[bytes, bytes]], name: bytes) -> str | None:
    """The one value of header `name` (lower case), as Latin-1 text; None when absent or
    repeated."""
    values = [value for key, value in headers if key == name]
    return values[0].decode("latin-1") if len(values) == 1 else None


def split_host(value: str) -> tuple[str, int | None] | None:
    """A Host header's name (lower case, no trailing dot, an IPv6 literal without its
    brackets) and port; None when it is not one."""
    value = value.strip()
    if value.startswith("["):
        literal, bracket, rest = value[1:].partition("]")
        if not bracket or not literal or (rest and not rest.startswith(":")):
            return None
        name, port_text = literal, rest[1:]
    else:
        name, _, port_text = value.partition(":")
    if port_text and not (port_text.isascii() and port_text.isdigit()):
        return None
    port = int(port_text) if port_text else None
    name = name.lower().removesuffix(".")
    if not name or (port is not None and port > 65535):
        return None
    return name, port


def is_same_origin(scope: Scope) -> bool:
    """Whether the request comes from no page, or from a page of this service's own origin:
    `Sec-Fetch-Site: same-origin`, or an `Origin` whose scheme, host and port are those the
    request reached (its scheme, its Host header). `Origin: null` is never this service's."""
    headers = scope.get("headers", [])
    if header(headers, b"sec-fetch-site") == "same-origin":
        return True
    if not any(name == b"origin" for name, _ in headers):
        return True
    origin = header(headers, b"origin")
    host = header(headers, b"host")
    if origin is None or host is None or origin.strip() == "null":
        return False
    reached = split_host(host)
    try:
        parts = urlsplit(origin.strip())
        port = parts.port
    except ValueError:
        return False
    scheme = str(scope.get("scheme", "http")).lower()
    if reached is None or parts.hostname is None or "@" in parts.netloc:
        return False
    if parts.path or parts.query or parts.fragment:
        return False
    if parts.scheme.lower() != scheme:
        return False
    name = parts.hostname.removesuffix(".")
    default = DEFAULT_PORTS.get(scheme)
    return name == reached[0] and (port or default) == (reached[1] or default)
