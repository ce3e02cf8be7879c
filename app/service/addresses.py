"""Webhook target addresses checked at create and PATCH: literal hosts judged, names resolved.

The check here is early feedback for the client; the sink checks again at every delivery
(DNS may answer otherwise by then), so a name that does not resolve now is let through.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterable, Sequence
from typing import Protocol

from app.domain.addresses import AddressPolicy, parse_host
from app.domain.errors import InvalidInputError
from app.domain.target import WebhookTarget, request_host

# How long a create waits for DNS before leaving the check to delivery.
RESOLVE_TIMEOUT = 5.0


class HostResolver(Protocol):
    async def addresses(self, host: str) -> Sequence[str]:
        """Every address `host` resolves to; raises OSError when it does not resolve."""
        ...


class SystemResolver:
    """The operating system's resolver (getaddrinfo), as deliveries use it."""

    async def addresses(self, host: str) -> Sequence[str]:
        infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
        return sorted({str(info[4][0]) for info in infos})


class TargetAddresses:
    """Refuses webhook URLs whose host is, or resolves to, a denied address."""

    def __init__(self, policy: AddressPolicy, resolver: HostResolver | None = None) -> None:
        self._policy = policy
        self._resolver = resolver or SystemResolver()

    async def check(self, targets: Iterable[tuple[WebhookTarget, str]]) -> None:
        """Check each (target, pointer of its url); the first refusal raises. Each distinct
        name is resolved once, all of them concurrently."""
        names: dict[str, list[str]] = {}
        for target, pointer in targets:
            # The name deliveries look up: a non-ASCII name in the HTTP client's encoding.
            host = request_host(target.url)
            if (problem := self._policy.literal_problem(host)) is not None:
                raise InvalidInputError(problem, pointer=pointer)
            if parse_host(host) is None:
                names.setdefault(host, []).append(pointer)
        if not names:
            return
        found = await asyncio.gather(*(self._resolve(name) for name in names))
        for (name, pointers), addresses in zip(names.items(), found, strict=True):
            problem = self._policy.resolved_problem(name, addresses)
            if problem is not None:
                raise InvalidInputError(problem, pointer=pointers[0])

    async def _resolve(self, name: str) -> Sequence[str]:
        try:
            async with asyncio.timeout(RESOLVE_TIMEOUT):
                return await self._resolver.addresses(name)
        except (OSError, TimeoutError, UnicodeError):  # no answer: delivery checks again
            return ()
