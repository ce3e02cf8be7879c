"""A stand-in for DNS: names answer whatever addresses a test sets, and lookups are counted.

One object serves both lookups Chronoq makes: the create-time check (the service's
`HostResolver`) and the sink's connector (an aiohttp resolver). Nothing leaves the process.
"""

from __future__ import annotations

import socket
from collections import Counter
from collections.abc import Sequence
from ipaddress import ip_address

from aiohttp.abc import AbstractResolver, ResolveResult


class FakeDNS(AbstractResolver):
    """`names` maps a host name to its addresses; any other name does not resolve."""

    def __init__(self, names: dict[str, list[str]] | None = None) -> None:
        self.names: dict[str, list[str]] = dict(names or {})
        self.lookups: Counter[str] = Counter()  # by the sink's connector
        self.checks: Counter[str] = Counter()  # by the create-time check

    def _answer(self, host: str) -> list[str]:
        addresses = self.names.get(host.lower().removesuffix("."))
        if not addresses:
            raise socket.gaierror(socket.EAI_NONAME, f"{host} does not resolve (test DNS)")
        return addresses

    async def addresses(self, host: str) -> Sequence[str]:
        self.checks[host] += 1
        return self._answer(host)

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.lookups[host] += 1
        return [
            ResolveResult(
                hostname=host,
                host=address,
                port=port,
                family=socket.AF_INET6 if ip_address(address).version == 6 else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST | socket.AI_NUMERICSERV,
            )
            for address in self._answer(host)
        ]

    async def close(self) -> None:
        pass
