"""The address settings' grammar: CIDR and host-name lists (CHRONOQ_TARGET_DENY and _ALLOW),
the Host names a replica answers to (CHRONOQ_ALLOWED_HOSTS), the proxies whose forwarded
headers are believed (CHRONOQ_FORWARDED_ALLOW_IPS) and the public origin
(CHRONOQ_PUBLIC_ORIGIN). Each parser refuses a malformed entry with a SettingsError naming
the variable.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from app.settings.errors import SettingsError
from app.settings.web_origins import WebOrigin, parse_origin

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# A host name in CHRONOQ_TARGET_ALLOW: letters, digits and hyphens in dot-separated labels,
# optionally under a leading `*.` (any name ending in the rest).
_HOST_NAME = re.compile(
    r"(?:\*\.)?(?:[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?\.)*[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
)


@dataclass(frozen=True)
class TargetList:
    """CIDRs and host names (lower case, no trailing dot) from a target address setting."""

    networks: tuple[IPNetwork, ...]
    names: tuple[str, ...]


def target_list(text: str, env: str, *, names: bool) -> TargetList:
    """Comma-separated CIDRs (a bare address is its /32 or /128) and, with `names`, host
    names; an entry that is neither refuses start naming `env`."""
    networks: list[IPNetwork] = []
    hosts: list[str] = []
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry))
            continue
        except ValueError as exc:
            problem = str(exc)
        name = entry.lower().removesuffix(".")
        numeric = name.rsplit(".", 1)[-1].isdigit() or "/" in name or ":" in name
        if names and not numeric and _HOST_NAME.fullmatch(name):
            hosts.append(name)
            continue
        what = "a CIDR or a host name" if names else "a CIDR"
        detail = "" if names and not numeric else f" ({problem})"
        raise SettingsError(f"{env}: {entry!r} is not {what}{detail}")
    return TargetList(tuple(networks), tuple(hosts))


@dataclass(frozen=True)
class HostAllowList:
    """The Host names a replica answers to: any, or these names, `*.` suffixes and networks."""

    any: bool = False
    names: frozenset[str] = frozenset()
    suffixes: tuple[str, ...] = ()  # ".example.com" for `*.example.com`
    networks: tuple[IPNetwork, ...] = ()

    def admits(self, name: str) -> bool:
        """Whether a Host's name (lower case, no trailing dot, an IPv6 literal without its
        brackets; the port left out) is one of these."""
        if self.any or name in self.names or name.endswith(self.suffixes):
            return True
        try:
            address = ipaddress.ip_address(name)
        except ValueError:
            return False
        return any(address in network for network in self.networks)


ANY_HOST = HostAllowList(any=True)
LOOPBACK_HOSTS = HostAllowList(
    names=frozenset({"localhost"}),
    networks=(ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128")),
)
_WITH_PORT = re.compile(r"(?:\[[^\]]*\]|[^:\[\]]+):[0-9]*")


def host_allow_list(text: str, env: str) -> HostAllowList:
    """Comma-separated host names, `*.suffix`es, IP addresses (IPv6 with or without its
    brackets), CIDRs, or `*`; an entry that is none of those refuses start naming `env`."""
    names: set[str] = set()
    suffixes: list[str] = []
    networks: list[IPNetwork] = []
    for entry in (part.strip() for part in text.split(",")):
        if not entry:
            continue
        if entry == "*":
            return ANY_HOST
        literal = entry[1:-1] if entry.startswith("[") and entry.endswith("]") else entry
        try:
            networks.append(ipaddress.ip_network(literal))
            continue
        except ValueError:
            pass
        name = entry.lower().removesuffix(".")
        numeric = name.rsplit(".", 1)[-1].isdigit() or "/" in name or ":" in name
        if not numeric and _HOST_NAME.fullmatch(name):
            if name.startswith("*."):
                suffixes.append(name[1:])
            else:
                names.add(name)
            continue
        hint = (
            " (ports are not compared: leave the port out)" if _WITH_PORT.fullmatch(entry) else ""
        )
        raise SettingsError(
            f"{env}: {entry!r} is not a host name, *.suffix, IP address, CIDR or *{hint}"
        )
    if not (names or suffixes or networks):
        raise SettingsError(f"{env} lists nothing; leave it unset for the default, or set *")
    return HostAllowList(False, frozenset(names), tuple(suffixes), tuple(networks))


def public_origin(text: str, env: str) -> WebOrigin:
    """The origin `text` names: http or https, a host name or IP address, an optional port,
    and no path (a lone trailing `/` aside), query or credentials; otherwise start is refused
    naming `env`."""
    stripped = text.strip()
    parsed = parse_origin(stripped.removesuffix("/") if stripped.count("/") == 3 else stripped)
    form = "an origin, scheme://host[:port] with http or https and nothing after the port"
    if parsed is None:
        raise SettingsError(f"{env}: {stripped[:100]!r} is not {form}")
    try:
        ipaddress.ip_address(parsed.host)
    except ValueError:
        numeric = parsed.host.rsplit(".", 1)[-1].isdigit()
        if numeric or parsed.host.startswith("*") or not _HOST_NAME.fullmatch(parsed.host):
            raise SettingsError(f"{env}: {parsed.host[:100]!r} is not a host name") from None
    if parsed.port == 0:
        raise SettingsError(f"{env}: the port must be 1 to 65535")
    return parsed


def proxy_allow_list(text: str, env: str) -> HostAllowList:
    """Comma-separated IP addresses and CIDRs, or `*`; anything else refuses start naming
    `env`."""
    if text.strip() == "*":
        return ANY_HOST
    listed = target_list(text, env, names=False)
    if not listed.networks:
        raise SettingsError(f"{env} lists nothing; leave it unset for 127.0.0.1, or set *")
    return HostAllowList(networks=listed.networks)
