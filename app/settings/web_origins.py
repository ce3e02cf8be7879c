"""Host headers and web origins as text: what a `Host` (or `X-Forwarded-Host`) names, and
the origin (scheme, host, port) a page or a setting names, compared the way a browser does.

Shared by the settings, which refuse a malformed CHRONOQ_PUBLIC_ORIGIN at start, and the API,
which compares a request's `Origin` with the origins this service is reached at.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_PORTS = {"http": 80, "https": 443}
# What may not appear in an origin after its `scheme://`: a path, a query, a fragment or
# credentials, or a backslash some parsers read as a slash.
_NOT_IN_ORIGIN = frozenset("/?#@\\")


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


@dataclass(frozen=True, slots=True)
class WebOrigin:
    """A web origin: scheme (http or https), host (as `split_host` gives it) and port, the
    scheme's default filled in, so that `http://a` and `http://a:80` are equal."""

    scheme: str
    host: str
    port: int

    @classmethod
    def of(cls, scheme: str, host: str, port: int | None) -> WebOrigin:
        return cls(scheme, host, DEFAULT_PORTS[scheme] if port is None else port)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        port = "" if self.port == DEFAULT_PORTS[self.scheme] else f":{self.port}"
        return f"{self.scheme}://{host}{port}"


def parse_origin(text: str) -> WebOrigin | None:
    """The origin `text` names (`scheme://host[:port]`, http or https, nothing after the
    port); None when it names none, `null` included."""
    scheme, separator, rest = text.strip().partition("://")
    scheme = scheme.lower()
    if not separator or scheme not in DEFAULT_PORTS or _NOT_IN_ORIGIN.intersection(rest):
        return None
    if not rest.isprintable() or " " in rest:
        return None
    named = split_host(rest)
    if named is None:
        return None
    return WebOrigin.of(scheme, *named)
