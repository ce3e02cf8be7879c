"""Database URLs as text: libpq's multi-host form, the session attributes a writer needs, the
password hidden. Imports nothing of SQLAlchemy or a driver, so the settings check a URL with it.

libpq writes several PostgreSQL hosts in the authority, `postgresql://u:p@db1:5432,db2/name`,
which SQLAlchemy's URL parser refuses; `for_sqlalchemy` rewrites it into the form SQLAlchemy's
asyncpg dialect takes (`?host=db1:5432&host=db2:5432`), from which asyncpg tries each host in
turn and keeps the first that accepts writes (`target_session_attrs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode

DEFAULT_PORT = 5432
# What a connection that writes may ask for; libpq's other values (`any`, `standby`, ...) may
# land on a read-only standby.
WRITABLE_SESSIONS = ("read-write", "primary")
SESSION_ATTRS = "target_session_attrs"


@dataclass(frozen=True)
class UrlParts:
    """A URL cut at its authority: `scheme://userinfo@hosts/path?query`."""

    scheme: str
    userinfo: str | None
    hosts: tuple[str, ...]  # each `host`, `host:port` or `[v6]:port`, as written
    path: str
    query: tuple[tuple[str, str], ...]


def parts(url: str) -> UrlParts | None:
    """The URL's parts, or None when it has no `scheme://` authority (sqlite:///file is one
    with no host)."""
    scheme, separator, rest = url.partition("://")
    if not separator:
        return None
    authority, slash, path = rest.partition("/")
    authority, question, query_in_authority = authority.partition("?")
    path = (slash + path) if slash else ""
    path, _, query = path.partition("?") if not question else (path, "", query_in_authority)
    userinfo, at, hostspec = authority.rpartition("@")
    hosts = tuple(host for host in hostspec.split(",")) if hostspec else ()
    return UrlParts(
        scheme=scheme,
        userinfo=userinfo if at else None,
        hosts=hosts,
        path=path,
        query=tuple(parse_qsl(query, keep_blank_values=True)),
    )


def is_multi_host(url: str) -> bool:
    """Whether the URL names more than one host, in the authority or as repeated `host=`."""
    found = parts(url)
    if found is None:
        return False
    in_query = sum(1 for name, _ in found.query if name == "host")
    return len(found.hosts) > 1 or in_query > 1


def session_attrs(url: str) -> str | None:
    """The `target_session_attrs` the URL asks for (None: not given)."""
    found = parts(url)
    if found is None:
        return None
    return dict(found.query).get(SESSION_ATTRS)


def _with_port(host: str) -> str:
    if host.startswith("["):
        return host if "]:" in host else f"{host}:{DEFAULT_PORT}"
    return host if ":" in host else f"{host}:{DEFAULT_PORT}"


def for_sqlalchemy(url: str) -> str:
    """A multi-host URL in the form SQLAlchemy parses (hosts as repeated `host=`, each with its
    port), asking for a writable session unless it names one; any other URL as it is."""
    found = parts(url)
    if found is None or not is_multi_host(url):
        return url
    query = [(name, value) for name, value in found.query if name != "host"]
    hosts = [host for host in found.hosts if host] + [v for n, v in found.query if n == "host"]
    if not any(name == SESSION_ATTRS for name, _ in query):
        query.append((SESSION_ATTRS, WRITABLE_SESSIONS[0]))
    items = [("host", _with_port(host)) for host in hosts] + query
    user = f"{found.userinfo}@" if found.userinfo is not None else ""
    return f"{found.scheme}://{user}{found.path or '/'}?{urlencode(items)}"


def redact(url: str) -> str | None:
    """The URL with its password replaced by `***`, whatever its form (None: not a URL this
    can read)."""
    found = parts(url)
    if found is None:
        return None
    userinfo = found.userinfo
    if userinfo is not None and ":" in userinfo:
        userinfo = userinfo.partition(":")[0] + ":***"
    query = [(n, "***" if n == "password" else v) for n, v in found.query]
    user = f"{userinfo}@" if userinfo is not None else ""
    tail = f"?{urlencode(query, safe=':*,')}" if query else ""
    return f"{found.scheme}://{user}{','.join(found.hosts)}{found.path}{tail}"
