"""Which network addresses a webhook may reach: hosts parsed in every spelling, addresses judged.

Pure rules (DESIGN section 8, target addresses); resolving names is the caller's I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address, ip_network

IPAddress = IPv4Address | IPv6Address
IPNetwork = IPv4Network | IPv6Network

# Denied whatever the configuration: "this network", link-local (cloud metadata services
# answer on 169.254.169.254, and AWS's IPv6 one on fd00:ec2::254), the unspecified and
# broadcast addresses, and multicast. Loopback and private ranges are not here: an internal
# scheduler calls internal services; CHRONOQ_TARGET_DENY adds them where that is wrong.
ALWAYS_DENIED: tuple[IPNetwork, ...] = tuple(
    ip_network(cidr)
    for cidr in (
        "0.0.0.0/8",
        "169.254.0.0/16",
        "224.0.0.0/4",
        "255.255.255.255/32",
        "::/128",
        "fe80::/10",
        "ff00::/8",
        "fd00:ec2::254/128",
    )
)

# IPv6 prefixes that carry an IPv4 address in their last 32 bits and reach it through a
# translator: NAT64's well-known prefix (RFC 6052).
_NAT64 = ip_network("64:ff9b::/96")
# A label that makes a host an IPv4 address to URL parsers and to inet_aton (WHATWG "ends
# in a number"): decimal, or hexadecimal after 0x.
_NUMERIC_LABEL = re.compile(r"^(?:[0-9]+|0[xX][0-9a-fA-F]*)$")


class HostSpellingError(ValueError):
    """A host that reads as a number but is no IPv4 address in any spelling."""


def _ipv4_part(part: str) -> int:
    if not part:
        raise HostSpellingError("an empty part")
    if part[:2] in ("0x", "0X"):
        return int(part[2:] or "0", 16)
    if len(part) > 1 and part[0] == "0":
        if not part.isdigit() or any(c in "89" for c in part):
            raise HostSpellingError(f"{part!r} is not octal")
        return int(part, 8)
    if not part.isdigit():
        raise HostSpellingError(f"{part!r} is not a number")
    return int(part)


def _numeric_ipv4(host: str) -> IPv4Address:
    """The WHATWG / inet_aton reading: up to four parts, decimal, octal (leading 0) or hex
    (0x), the last one filling the remaining bytes: 2852039166, 0xA9FEA9FE,
    0251.0376.0251.0376 and 169.254.43518 are all 169.254.169.254."""
    parts = host.split(".")
    if len(parts) > 4:
        raise HostSpellingError("more than four numeric parts")
    try:
        numbers = [_ipv4_part(part) for part in parts]
    except HostSpellingError:
        raise
    except ValueError as exc:
        raise HostSpellingError(str(exc)) from None
    *leading, last = numbers
    if any(number > 255 for number in leading) or last >= 256 ** (5 - len(numbers)):
        raise HostSpellingError("a part is out of range")
    value = last
    for index, number in enumerate(leading):
        value += number << (8 * (3 - index))
    return IPv4Address(value)


def parse_host(host: str) -> IPAddress | None:
    """The address a URL host names (IPv6 with or without brackets and zone, IPv4 in any
    spelling, a trailing dot allowed), or None for a host name.

    Raises HostSpellingError for a host that ends in a number but is no address.
    """
    text = host.strip("[]") if host.startswith("[") else host
    if ":" in text:
        try:
            return IPv6Address(text.replace("%25", "%", 1))
        except ValueError as exc:
            raise HostSpellingError(str(exc)) from None
    text = text.removesuffix(".")
    last = text.rsplit(".", 1)[-1]
    if not _NUMERIC_LABEL.match(last):
        return None
    return _numeric_ipv4(text)


def embedded_ipv4(address: IPv6Address) -> IPv4Address | None:
    """The IPv4 address an IPv6 one reaches through a mapping or a translator: IPv4-mapped
    (::ffff:a.b.c.d), IPv4-compatible (::a.b.c.d), NAT64 (64:ff9b::a.b.c.d), 6to4
    (2002:aabb:ccdd::) and Teredo (its client address)."""
    if (mapped := address.ipv4_mapped) is not None:
        return mapped
    value = int(address)
    if value >> 32 == 0 and value > 0xFFFF:  # ::a.b.c.d, but not :: or ::1
        return IPv4Address(value)
    if address in _NAT64:
        return IPv4Address(value & 0xFFFFFFFF)
    if (sixtofour := address.sixtofour) is not None:
        return sixtofour
    if (teredo := address.teredo) is not None:
        return teredo[1]
    return None


def _bare(address: IPAddress) -> str:
    """The address without an IPv6 zone, as networks compare it."""
    return str(address).split("%", 1)[0]


@dataclass(frozen=True, slots=True)
class AddressPolicy:
    """The always-denied ranges, the configured deny list, and the optional allow list.

    `allow_networks` None admits every address not denied; otherwise a host is admitted
    when its name is listed (exactly, or under a `*.` suffix) or every address it names
    lies in an allowed network. Denials apply in every case.
    """

    deny: tuple[IPNetwork, ...] = ()
    allow_networks: tuple[IPNetwork, ...] | None = None
    allow_names: frozenset[str] = frozenset()
    allow_suffixes: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        deny: Iterable[IPNetwork] = (),
        allow_networks: Iterable[IPNetwork] | None = None,
        allow_names: Iterable[str] = (),
    ) -> AddressPolicy:
        """A policy from configured lists; names are exact or `*.example.com` suffixes."""
        names = [normal_name(name) for name in allow_names]
        return cls(
            deny=tuple(deny),
            allow_networks=None if allow_networks is None else tuple(allow_networks),
            allow_names=frozenset(name for name in names if not name.startswith("*.")),
            allow_suffixes=tuple(name[1:] for name in names if name.startswith("*.")),
        )

    def admits_name(self, name: str) -> bool:
        """Whether the allow list names this host (always true without an allow list)."""
        if self.allow_networks is None:
            return True
        name = normal_name(name)
        return name in self.allow_names or name.endswith(self.allow_suffixes)

    def denial(self, address: IPAddress, *, name_admitted: bool = False) -> Denial | None:
        """Why `address` is denied (None: it is allowed). `name_admitted`: the host was
        reached by a name the allow list admits, so only the denials apply."""
        address = ip_address(_bare(address))
        candidates: list[IPAddress] = [address]
        if isinstance(address, IPv6Address) and (inner := embedded_ipv4(address)) is not None:
            candidates.append(inner)
        for candidate in candidates:
            for network in ALWAYS_DENIED:
                if candidate in network:
                    return Denial(address, candidate, f"in {network}, always denied")
            for network in self.deny:
                if candidate in network:
                    return Denial(address, candidate, f"in {network}, on the deny list")
        if self.allow_networks is None or name_admitted:
            return None
        if any(c in network for c in candidates for network in self.allow_networks):
            return None
        return Denial(address, candidates[-1], "not on the allow list")

    def literal_problem(self, host: str) -> str | None:
        """Why a URL host is refused before any lookup: it names a denied address in some
        spelling, or reads as a number but is none. None for an allowed address or a name."""
        try:
            address = parse_host(host)
        except HostSpellingError as exc:
            return f"the host {host} reads as a number but is not an address ({exc})"
        if address is None:
            return None
        denial = self.denial(address)
        if denial is None:
            return None
        if ":" in host or _bare(address) == _bare_host(host):
            return f"the host {host} is {denial.what}"
        return f"the host {host} is {denial}"

    def resolved_problem(self, name: str, addresses: Iterable[str]) -> str | None:
        """Why a host name is refused given every address it resolves to (any denied one
        is enough). An address that does not parse is denied: nothing unchecked passes."""
        admitted = self.admits_name(name)
        for text in addresses:
            try:
                address = ip_address(text.split("%", 1)[0])
            except ValueError:
                return f"the host {name} resolves to {text!r}, which is not an address"
            denial = self.denial(address, name_admitted=admitted)
            if denial is not None:
                return f"the host {name} resolves to {denial}"
        return None


@dataclass(frozen=True, slots=True)
class Denial:
    """A denied address, the address it reaches (itself, or the IPv4 one it embeds), and why."""

    address: IPAddress
    reached: IPAddress
    reason: str

    @property
    def what(self) -> str:
        if self.reached == self.address:
            return f"a denied address ({self.reason})"
        return f"a denied address: it reaches {self.reached} ({self.reason})"

    def __str__(self) -> str:
        return f"{self.address}, {self.what}"


def _bare_host(host: str) -> str:
    return host.strip("[]").split("%", 1)[0].lower().removesuffix(".")


def normal_name(name: str) -> str:
    """A host name as compared: lower case, without the trailing dot of a full name."""
    return name.lower().removesuffix(".")
