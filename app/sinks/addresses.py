"""Delivery-time target address checks: every address a name resolves to, every literal host.

Guards DNS rebinding: a name checked at create may resolve elsewhere by the time it is
delivered to, so the connector's resolver refuses an answer holding any denied address.
The check sits inside the resolver, so the connector's DNS cache only ever holds answers
that passed it: names are checked once per cache entry, not once per delivery.
"""

from __future__ import annotations

import socket

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from yarl import URL

from app.domain.addresses import AddressPolicy

# Literal verdicts kept per URL; past this many distinct URLs the memo starts over.
MAX_REMEMBERED_URLS = 10_000


class DeniedAddressError(OSError):
    """The target's host is, or resolves to, a denied address."""


class CheckingResolver(AbstractResolver):
    """Resolves through `inner` and fails when any answer is a denied address."""

    def __init__(self, policy: AddressPolicy, inner: AbstractResolver | None = None) -> None:
        """Built inside the running loop (the default resolver binds to it)."""
        self._policy = policy
        self._owns_inner = inner is None
        self._inner = inner or aiohttp.DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        answers = await self._inner.resolve(host, port, family)
        problem = self._policy.resolved_problem(host, [answer["host"] for answer in answers])
        if problem is not None:
            raise DeniedAddressError(problem)
        return answers

    async def close(self) -> None:
        if self._owns_inner:
            await self._inner.close()


class LiteralHosts:
    """What to say about a URL before sending: a refusal when its host is an address (in
    any spelling, which the connector would not resolve) that the policy denies; names are
    left to the resolver. One dict lookup per delivery after a URL's first."""

    def __init__(self, policy: AddressPolicy) -> None:
        self._policy = policy
        self._verdicts: dict[str, str | None] = {}

    def problem(self, url: str) -> str | None:
        try:
            return self._verdicts[url]
        except KeyError:
            pass
        verdict = self._judge(url)
        if len(self._verdicts) >= MAX_REMEMBERED_URLS:
            self._verdicts.clear()
        self._verdicts[url] = verdict
        return verdict

    def _judge(self, url: str) -> str | None:
        try:
            host = URL(url).raw_host or ""  # the host aiohttp itself will connect to
        except ValueError:
            return None  # not a URL aiohttp sends to either; its own error says why
        return self._policy.literal_problem(host)
