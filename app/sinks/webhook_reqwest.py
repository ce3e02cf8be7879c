"""Webhook delivery over pyreqwest (reqwest, in Rust): the requests, outcomes and address
checks of `WebhookSink`, chosen with CHRONOQ_WEBHOOK_CLIENT=pyreqwest.

reqwest takes no resolver from Python, so names are resolved and checked here (through the
same `CheckingResolver`, an answer kept DNS_CACHE_SECONDS), and a name's requests go through
a client of its own whose one DNS entry is that name's checked address
(`ClientBuilder.resolve`): the connection goes to the address that was checked, while the
`Host` header and the TLS name stay the URL's. Hosts are judged as reqwest reads them
(WHATWG URL rules), which is not always as yarl reads them: `%31%32%37.0.0.1` is 127.0.0.1
to reqwest and a name to yarl, `exa\u00admple.com` is example.com to reqwest and refused by
yarl. A host the two read differently is refused.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass

from aiohttp.abc import AbstractResolver
from pyreqwest.client import Client, ClientBuilder
from pyreqwest.exceptions import BuilderError, ConnectError, NetworkError, RequestError
from pyreqwest.http import Url
from pyreqwest.response import ResponseBodyReader
from yarl import URL

from app.domain.addresses import AddressPolicy, parse_host
from app.domain.occurrence import (
    RESPONSE_EXCERPT_BYTES,
    Attempted,
    Delivered,
    Delivery,
    FailureReason,
    Permanent,
    Retryable,
    Unsent,
    response_excerpt,
)
from app.domain.secrets import scrub_credentials
from app.domain.target import WebhookTarget
from app.sinks.addresses import CheckingResolver, DeniedAddressError, LiteralHosts
from app.sinks.base import _LOCAL_SHORTAGES, local_shortage
from app.sinks.signing import WebhookSigner
from app.sinks.webhook import (
    BODY_GRACE,
    DNS_CACHE_SECONDS,
    MAX_DRAINED_BODY,
    outcome_for_status,
    webhook_headers,
)

# Names whose checked address (and client) are kept; past this many the oldest goes.
MAX_PINNED_NAMES = 1024
# Routes (how a URL's host is read) kept per URL; past this many the memo starts over.
MAX_REMEMBERED_URLS = 10_000
_OS_ERROR = re.compile(r"\(os error (\d+)\)")


@dataclass(frozen=True, slots=True)
class _Route:
    """How a URL is sent: `refusal` when it cannot be; else through the literal client
    (`name` None: its host is an address) or through `name`'s pinned client."""

    refusal: str | None = None
    denied: bool = False
    name: str | None = None
    port: int = 0
    credentials: bool = False  # userinfo in the URL (sent as Basic auth)


@dataclass(slots=True)
class _Pin:
    address: str
    client: Client
    expires: float


def _reqwest_shortage(exc: RequestError) -> str | None:
    """What this machine ran out of, when reqwest's error names a local resource error."""
    for cause in exc.details.get("causes") or ():
        match = _OS_ERROR.search(cause["message"])
        if match is not None and int(match.group(1)) in _LOCAL_SHORTAGES:
            return os.strerror(int(match.group(1)))
    return None


def _innermost(exc: RequestError) -> str:
    """reqwest's deepest cause (what failed), else its message."""
    causes = exc.details.get("causes") or ()
    return causes[-1]["message"] if causes else exc.message


async def _read_excerpt(reader: ResponseBodyReader, limit: int, drain: int) -> tuple[bytes, bool]:
    """As `app.sinks.webhook._read_excerpt`: the first `limit` bytes of a reply's body and
    whether it ended, dropping the rest up to `drain` bytes, for at most BODY_GRACE."""
    kept: list[bytes] = []
    have = 0
    seen = 0
    try:
        async with asyncio.timeout(BODY_GRACE):
            while seen <= drain:
                chunk = await reader.read_chunk()
                if chunk is None:
                    return b"".join(kept), True
                seen += len(chunk)
                if have < limit:
                    kept.append(chunk[: limit - have].to_bytes())
                    have += len(kept[-1])
    except TimeoutError:
        pass
    return b"".join(kept), False


class PyreqwestSink:
    def __init__(
        self,
        *,
        concurrency: int,
        max_timeout: float,
        signing_secrets: Sequence[str] = (),
        policy: AddressPolicy | None = None,
        resolver: AbstractResolver | None = None,
    ) -> None:
        self._concurrency = concurrency
        self._policy = policy or AddressPolicy()
        self._literals = LiteralHosts(self._policy)
        self._resolver = resolver
        self._max_timeout = max_timeout
        self._signer = WebhookSigner(signing_secrets) if signing_secrets else None
        self._routes: dict[str, _Route] = {}
        self._pins: dict[str, _Pin] = {}
        self._literal: Client | None = None

    def _build(self, pin: tuple[str, str] | None = None) -> Client:
        builder = (
            ClientBuilder()
            .no_proxy()  # never the environment's proxies (they would connect elsewhere)
            .follow_redirects(False)
            .referer(False)
            .gzip(False)
            .brotli(False)
            .zstd(False)
            .deflate(False)
            .max_connections(self._concurrency)
            .pool_max_idle_per_host(self._concurrency)
        )
        if pin is not None:
            # The client's only DNS entry; port 0: the URL's own port.
            builder = builder.resolve(pin[0], pin[1], 0)
        return builder.build()

    async def open(self) -> None:
        self._checked_dns = CheckingResolver(self._policy, self._resolver)
        # Sends only to URLs whose host reqwest reads as an address: it never resolves.
        self._literal = self._build()

    async def close(self) -> None:
        if self._literal is not None:
            clients = [self._literal, *(pin.client for pin in self._pins.values())]
            self._literal = None
            self._pins.clear()
            for client in clients:
                await client.close()
            await self._checked_dns.close()

    def headers(self, delivery: Delivery, target: WebhookTarget) -> dict[str, str]:
        return webhook_headers(delivery, target, self._signer)

    def _route(self, url: str) -> _Route:
        try:
            return self._routes[url]
        except KeyError:
            pass
        route = self._read(url)
        if len(self._routes) >= MAX_REMEMBERED_URLS:
            self._routes.clear()
        self._routes[url] = route
        return route

    def _read(self, url: str) -> _Route:
        """The URL as reqwest will send it, judged."""
        try:
            theirs = Url(url)
            ours = URL(url)
        except ValueError as exc:
            return _Route(scrub_credentials(f"the target URL cannot be requested: {exc}"))
        host = theirs.host_str or ""
        credentials = bool(theirs.username or theirs.password)
        port = theirs.port_or_known_default or 0
        bare = host.removeprefix("[").removesuffix("]")
        try:
            address = parse_host(bare)
        except ValueError:
            address = None
        checked = ours.raw_host or ""
        try:
            same = address == parse_host(checked) if address is not None else host == checked
        except ValueError:
            same = False
        if not same:
            return _Route(
                "the target URL cannot be requested: its host reads as "
                f"{host!r} to the client and as {checked!r} to the address checks"
            )
        if address is not None:
            problem = self._policy.literal_problem(bare)
            if problem is not None:
                return _Route(f"address denied: {problem}", denied=True)
            return _Route(port=port, credentials=credentials)
        return _Route(name=host, port=port, credentials=credentials)

    async def _pinned(self, name: str, port: int) -> Client:
        """The client whose one DNS entry is `name`'s checked address (resolved and checked
        anew once its answer is DNS_CACHE_SECONDS old)."""
        now = time.monotonic()
        pin = self._pins.get(name)
        if pin is not None and pin.expires > now:
            return pin.client
        answers = await self._checked_dns.resolve(name, port, socket.AF_UNSPEC)
        if not answers:
            raise OSError(f"{name} resolves to no address")
        address = answers[0]["host"]
        if pin is not None and pin.address == address:
            pin.expires = now + DNS_CACHE_SECONDS
            return pin.client
        # A replaced client is dropped, not closed: requests still on it finish.
        self._pins.pop(name, None)
        if len(self._pins) >= MAX_PINNED_NAMES:
            del self._pins[next(iter(self._pins))]
        client = self._build((name, address))
        self._pins[name] = _Pin(address, client, now + DNS_CACHE_SECONDS)
        return client

    async def deliver(self, delivery: Delivery) -> Attempted:
        target = delivery.target
        assert isinstance(target, WebhookTarget)
        assert self._literal is not None, "PyreqwestSink.open() was not called"
        if (denied := self._literals.problem(target.url)) is not None:
            return Permanent(f"address denied: {denied}", reason=FailureReason.DENIED)
        route = self._route(target.url)
        if route.refusal is not None:
            if route.denied:
                return Permanent(route.refusal, reason=FailureReason.DENIED)
            return Permanent(route.refusal)
        headers = self.headers(delivery, target)
        if route.credentials and any(
            name.lower() == "authorization" for name in headers
        ):
            # What aiohttp refuses too: reqwest would send both the URL's and the header's.
            return Permanent(
                "the request cannot be made: a URL with credentials cannot also carry an "
                "Authorization header"
            )
        limit = min(self._max_timeout, target.timeout_seconds)
        try:
            if limit >= self._max_timeout:
                # The dispatcher bounds every delivery by the dispatch timeout already.
                return await self._send(delivery, target, route, headers)
            async with asyncio.timeout(limit):
                return await self._send(delivery, target, route, headers)
        except TimeoutError:
            return Retryable(f"timed out after {limit:g}s", reason=FailureReason.TIMEOUT)
        except DeniedAddressError as exc:
            return Permanent(f"address denied: {exc}", reason=FailureReason.DENIED)
        except BuilderError as exc:
            return Permanent(scrub_credentials(f"the request cannot be made: {_innermost(exc)}"))
        except ConnectError as exc:
            if (local := _reqwest_shortage(exc)) is not None:
                return Unsent(f"this replica cannot open a connection: {local}")
            return Retryable(
                scrub_credentials(f"connection failed: {_innermost(exc)}"),
                reason=FailureReason.CONNECT,
            )
        except RequestError as exc:
            if (local := _reqwest_shortage(exc)) is not None:
                return Unsent(f"this replica cannot open a connection: {local}")
            connection = isinstance(exc, NetworkError)
            return Retryable(
                scrub_credentials(f"{type(exc).__name__}: {_innermost(exc)}"),
                reason=FailureReason.CONNECT if connection else FailureReason.OTHER,
            )
        except OSError as exc:  # the name's lookup
            if (local := local_shortage(exc)) is not None:
                return Unsent(f"this replica cannot open a connection: {local}")
            return Retryable(
                scrub_credentials(f"connection failed: {exc}"), reason=FailureReason.CONNECT
            )

    async def _send(
        self, delivery: Delivery, target: WebhookTarget, route: _Route, headers: dict[str, str]
    ) -> Attempted:
        client = self._literal if route.name is None else await self._pinned(route.name, route.port)
        assert client is not None
        request = (
            client.request(target.method, target.url)
            .headers(headers)
            .body_bytes(delivery.body)
            # Nothing read ahead: with any read-ahead the head is not handed over until
            # that much of the body (or its end) has come, however slowly it trickles.
            .streamed_read_buffer_limit(0)
            .build_streamed()
        )
        async with request as response:
            # Judged on the status line: what follows is read for its excerpt only.
            status = response.status
            retry_after = response.get_header("Retry-After")
            length = response.get_header("Content-Length")
            drain = (
                MAX_DRAINED_BODY
                if length is None or not length.isdigit() or int(length) <= MAX_DRAINED_BODY
                else 0
            )
            try:
                body, _ = await _read_excerpt(response.body_reader, RESPONSE_EXCERPT_BYTES, drain)
            except (RequestError, OSError):
                body = b""  # the reply's status stands
            # Leaving the block drops a connection whose body was not read to its end.
        if 200 <= status < 300:
            return Delivered(status, response_excerpt(body) if body else None)
        return outcome_for_status(status, retry_after, body)

