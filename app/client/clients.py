"""The Chronoq client, synchronous (`Client`) and asynchronous (`AsyncClient`), on httpx.

Both have the same methods, one per operation of app/client/calls.py (which documents
each), plus an `iter_*` for each list that follows its cursors to the end. A refusal is
raised as the `ProblemError` of its status (app/client/errors.py); a 503 or a connection
that failed is tried again, up to `retries` times, after the service's `Retry-After` (or an
exponential pause), when sending it again cannot do anything twice (`Call.repeatable`; a
connection that was never made is always tried again).
"""

from __future__ import annotations

import asyncio
import functools
import random
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

import httpx

from app.api.schemas import Page
from app.client import calls
from app.client.calls import Call
from app.client.errors import (
    ProblemError,
    UnavailableError,
    UnreachableError,
    problem_of,
    unexpected_answer,
)
from app.domain.secrets import scrub_credentials
from app.domain.tenants import TENANT_HEADER

P = ParamSpec("P")
T = TypeVar("T")

DEFAULT_TIMEOUT = 30.0
DEFAULT_RETRIES = 3
MAX_PAUSE = 30.0  # the longest wait between tries, whatever Retry-After says
_FIRST_PAUSE = 0.5


def _user_agent() -> str:
    try:
        return f"chronoq-client/{metadata.version('chronoq')}"
    except metadata.PackageNotFoundError:
        return "chronoq-client"


class _Settings:
    """What both clients are made of: where, which key, how patient."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        api_key_file: str | Path | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        headers: dict[str, str] | None = None,
        trust_env: bool = True,
        tenant: str | None = None,
    ) -> None:
        """`trust_env`: whether httpx reads proxies and certificates from the environment
        (HTTP_PROXY, SSL_CERT_FILE, ...), as it does by default. `tenant`: the tenant every
        call acts in (sent as `Chronoq-Tenant`; None: the key's own, or `default`)."""
        if api_key is not None and api_key_file is not None:
            raise ValueError("give api_key or api_key_file, not both")
        if api_key_file is not None:
            api_key = Path(api_key_file).read_text(encoding="utf-8").strip()
        if retries < 0:
            raise ValueError("retries must be 0 or more")
        # A password in the URL is sent as HTTP Basic credentials, as httpx would send it,
        # but kept out of the URL: no message or log line of the client can then show it.
        url = httpx.URL(base_url.rstrip("/"))
        self.auth = httpx.BasicAuth(url.username, url.password) if url.userinfo else None
        self.base_url = str(url.copy_with(username=None, password=None))
        self.retries = retries
        self.timeout = timeout
        self.trust_env = trust_env
        self.headers = {"User-Agent": _user_agent(), "Accept": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        if tenant is not None:
            self.headers[TENANT_HEADER] = tenant
        self.headers.update(headers or {})

    def request(self, call: Call[Any]) -> dict[str, Any]:
        """httpx's arguments for `call`."""
        arguments: dict[str, Any] = {
            "method": call.method,
            "url": call.path,
            "params": list(call.params),
            "headers": dict(call.headers),
        }
        if call.body is not None:
            arguments["json"] = call.body
        return arguments

    def after(self, call: Call[Any], tries: int, error: Exception) -> float:
        """How long to wait before sending `call` again after `error`, its `tries`th
        failure; raises what its caller gets when it is not sent again."""
        if not _again(self, call, tries, error):
            if isinstance(error, httpx.TransportError):
                raise _unreachable(self, error) from error
            raise error
        return self.pause(tries, error if isinstance(error, ProblemError) else None)

    def pause(self, tries: int, problem: ProblemError | None) -> float:
        if problem is not None and problem.retry_after is not None:
            return min(problem.retry_after, MAX_PAUSE)
        # full jitter over a doubling ceiling
        return random.uniform(0, min(_FIRST_PAUSE * 2**tries, MAX_PAUSE))


def _outcome(call: Call[T], response: httpx.Response) -> T:
    if response.status_code >= 400:
        raise problem_of(response)
    if response.status_code >= 300:
        raise unexpected_answer(response, "a redirect, which the client does not follow")
    try:
        return call.read(response)
    except ValueError as exc:  # pydantic's ValidationError: not JSON, or not the answer's shape
        raise unexpected_answer(response, _not_read(response, exc)) from None


def _not_read(response: httpx.Response, exc: ValueError) -> str:
    kind = response.headers.get("Content-Type", "").split(";")[0].strip() or "no content type"
    if "json" not in kind:
        return f"{kind}, not JSON"
    errors = getattr(exc, "errors", None)
    first = errors()[0] if callable(errors) and errors() else None
    if first is None:
        return "JSON the client cannot read"
    where = ".".join(str(part) for part in first.get("loc", ())) or "the answer"
    return f"JSON the client cannot read ({where}: {first.get('msg', 'invalid')})"


def _again(settings: _Settings, call: Call[Any], tries: int, error: Exception) -> bool:
    """Whether to send `call` again after `error`, its `tries`th failure."""
    if tries > settings.retries:
        return False
    if isinstance(error, httpx.ConnectError | httpx.ConnectTimeout):
        return True  # nothing reached the service
    if isinstance(error, UnavailableError | httpx.TransportError):
        return call.repeatable
    return False


def _unreachable(settings: _Settings, error: httpx.TransportError) -> UnreachableError:
    return UnreachableError(scrub_credentials(f"cannot reach {settings.base_url}: {error!r}"))


# -- the operations, as methods of both clients --------------------------------------


def _sync(build: Callable[P, Call[T]]) -> Callable[Concatenate[Client, P], T]:
    @functools.wraps(build)
    def method(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self.send(build(*args, **kwargs))

    return method


def _sync_pages(build: Callable[P, Call[Page[T]]]) -> Callable[Concatenate[Client, P], Iterator[T]]:
    @functools.wraps(build)
    def method(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> Iterator[T]:
        return self.pages(build(*args, **kwargs))

    method.__doc__ = f"Every item, following the cursors. {build.__doc__}"
    return method


def _async(
    build: Callable[P, Call[T]],
) -> Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, T]]:
    @functools.wraps(build)
    async def method(self: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self.send(build(*args, **kwargs))

    return method


def _async_pages(
    build: Callable[P, Call[Page[T]]],
) -> Callable[Concatenate[AsyncClient, P], AsyncIterator[T]]:
    @functools.wraps(build)
    def method(self: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> AsyncIterator[T]:
        return self.pages(build(*args, **kwargs))

    method.__doc__ = f"Every item, following the cursors. {build.__doc__}"
    return method


class Client:
    """A synchronous client: `with Client("http://127.0.0.1:8000", api_key=...) as c:`."""

    def __init__(
        self, base_url: str, *, transport: httpx.BaseTransport | None = None, **options: Any
    ) -> None:
        self._settings = _Settings(base_url, **options)
        self._http = httpx.Client(
            base_url=self._settings.base_url,
            headers=self._settings.headers,
            timeout=self._settings.timeout,
            trust_env=self._settings.trust_env,
            transport=transport,
            auth=self._settings.auth,
        )

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def send(self, call: Call[T]) -> T:
        """Send one call, tried again as the module says; its answer, read."""
        tries = 0
        while True:
            try:
                return _outcome(call, self._http.request(**self._settings.request(call)))
            except (ProblemError, httpx.TransportError) as error:
                tries += 1
                time.sleep(self._settings.after(call, tries, error))

    def pages(self, call: Call[Page[T]]) -> Iterator[T]:
        """Every item of a list, page after page."""
        while True:
            page = self.send(call)
            yield from page.items
            if page.next_cursor is None:
                return
            call = call.at(page.next_cursor)

    # the operations (app/client/calls.py documents each)
    health = _sync(calls.health)
    create_schedule = _sync(calls.create_schedule)
    create_schedules = _sync(calls.create_schedules)
    get_schedule = _sync(calls.get_schedule)
    list_schedules = _sync(calls.list_schedules)
    patch_schedule = _sync(calls.patch_schedule)
    pause_schedule = _sync(calls.pause_schedule)
    resume_schedule = _sync(calls.resume_schedule)
    cancel_schedule = _sync(calls.cancel_schedule)
    trigger_schedule = _sync(calls.trigger_schedule)
    backfill_schedule = _sync(calls.backfill_schedule)
    list_occurrences = _sync(calls.list_occurrences)
    list_events = _sync(calls.list_events)
    get_occurrence = _sync(calls.get_occurrence)
    list_attempts = _sync(calls.list_attempts)
    list_dead_letters = _sync(calls.list_dead_letters)
    get_dead_letter = _sync(calls.get_dead_letter)
    replay_dead_letter = _sync(calls.replay_dead_letter)
    replay_dead_letters = _sync(calls.replay_dead_letters)
    discard_dead_letter = _sync(calls.discard_dead_letter)
    list_flow_keys = _sync(calls.list_flow_keys)
    get_flow_key = _sync(calls.get_flow_key)
    list_waiting_occurrences = _sync(calls.list_waiting_occurrences)
    get_activity = _sync(calls.get_activity)
    put_flow_key = _sync(calls.put_flow_key)
    clear_flow_key_backoff = _sync(calls.clear_flow_key_backoff)
    delete_flow_key = _sync(calls.delete_flow_key)
    list_tenants = _sync(calls.list_tenants)
    get_tenant = _sync(calls.get_tenant)
    put_tenant = _sync(calls.put_tenant)
    delete_tenant = _sync(calls.delete_tenant)
    create_tenant_key = _sync(calls.create_tenant_key)
    list_tenant_keys = _sync(calls.list_tenant_keys)
    revoke_tenant_key = _sync(calls.revoke_tenant_key)
    list_tenant_events = _sync(calls.list_tenant_events)
    create_endpoint = _sync(calls.create_endpoint)
    list_endpoints = _sync(calls.list_endpoints)
    get_endpoint = _sync(calls.get_endpoint)
    patch_endpoint = _sync(calls.patch_endpoint)
    delete_endpoint = _sync(calls.delete_endpoint)
    rotate_endpoint_secret = _sync(calls.rotate_endpoint_secret)
    enable_endpoint = _sync(calls.enable_endpoint)
    list_endpoint_events = _sync(calls.list_endpoint_events)
    list_endpoint_attempts = _sync(calls.list_endpoint_attempts)
    put_topic = _sync(calls.put_topic)
    list_topics = _sync(calls.list_topics)
    get_topic = _sync(calls.get_topic)
    delete_topic = _sync(calls.delete_topic)
    create_subscription = _sync(calls.create_subscription)
    list_subscriptions = _sync(calls.list_subscriptions)
    get_subscription = _sync(calls.get_subscription)
    patch_subscription = _sync(calls.patch_subscription)
    delete_subscription = _sync(calls.delete_subscription)
    preview_trigger = _sync(calls.preview_trigger)

    # every item of a list, following its cursors
    iter_schedules = _sync_pages(calls.list_schedules)
    iter_occurrences = _sync_pages(calls.list_occurrences)
    iter_events = _sync_pages(calls.list_events)
    iter_attempts = _sync_pages(calls.list_attempts)
    iter_dead_letters = _sync_pages(calls.list_dead_letters)
    iter_flow_keys = _sync_pages(calls.list_flow_keys)
    iter_waiting_occurrences = _sync_pages(calls.list_waiting_occurrences)
    iter_tenants = _sync_pages(calls.list_tenants)
    iter_tenant_events = _sync_pages(calls.list_tenant_events)
    iter_endpoints = _sync_pages(calls.list_endpoints)
    iter_endpoint_events = _sync_pages(calls.list_endpoint_events)
    iter_endpoint_attempts = _sync_pages(calls.list_endpoint_attempts)
    iter_topics = _sync_pages(calls.list_topics)
    iter_subscriptions = _sync_pages(calls.list_subscriptions)


class AsyncClient:
    """An asynchronous client: `async with AsyncClient("http://127.0.0.1:8000") as c:`."""

    def __init__(
        self,
        base_url: str,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        **options: Any,
    ) -> None:
        self._settings = _Settings(base_url, **options)
        self._http = httpx.AsyncClient(
            base_url=self._settings.base_url,
            headers=self._settings.headers,
            timeout=self._settings.timeout,
            trust_env=self._settings.trust_env,
            transport=transport,
            auth=self._settings.auth,
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def send(self, call: Call[T]) -> T:
        """Send one call, tried again as the module says; its answer, read."""
        tries = 0
        while True:
            try:
                return _outcome(call, await self._http.request(**self._settings.request(call)))
            except (ProblemError, httpx.TransportError) as error:
                tries += 1
                await asyncio.sleep(self._settings.after(call, tries, error))

    async def pages(self, call: Call[Page[T]]) -> AsyncIterator[T]:
        """Every item of a list, page after page."""
        while True:
            page = await self.send(call)
            for item in page.items:
                yield item
            if page.next_cursor is None:
                return
            call = call.at(page.next_cursor)

    # the operations (app/client/calls.py documents each)
    health = _async(calls.health)
    create_schedule = _async(calls.create_schedule)
    create_schedules = _async(calls.create_schedules)
    get_schedule = _async(calls.get_schedule)
    list_schedules = _async(calls.list_schedules)
    patch_schedule = _async(calls.patch_schedule)
    pause_schedule = _async(calls.pause_schedule)
    resume_schedule = _async(calls.resume_schedule)
    cancel_schedule = _async(calls.cancel_schedule)
    trigger_schedule = _async(calls.trigger_schedule)
    backfill_schedule = _async(calls.backfill_schedule)
    list_occurrences = _async(calls.list_occurrences)
    list_events = _async(calls.list_events)
    get_occurrence = _async(calls.get_occurrence)
    list_attempts = _async(calls.list_attempts)
    list_dead_letters = _async(calls.list_dead_letters)
    get_dead_letter = _async(calls.get_dead_letter)
    replay_dead_letter = _async(calls.replay_dead_letter)
    replay_dead_letters = _async(calls.replay_dead_letters)
    discard_dead_letter = _async(calls.discard_dead_letter)
    list_flow_keys = _async(calls.list_flow_keys)
    get_flow_key = _async(calls.get_flow_key)
    list_waiting_occurrences = _async(calls.list_waiting_occurrences)
    get_activity = _async(calls.get_activity)
    put_flow_key = _async(calls.put_flow_key)
    clear_flow_key_backoff = _async(calls.clear_flow_key_backoff)
    delete_flow_key = _async(calls.delete_flow_key)
    list_tenants = _async(calls.list_tenants)
    get_tenant = _async(calls.get_tenant)
    put_tenant = _async(calls.put_tenant)
    delete_tenant = _async(calls.delete_tenant)
    create_tenant_key = _async(calls.create_tenant_key)
    list_tenant_keys = _async(calls.list_tenant_keys)
    revoke_tenant_key = _async(calls.revoke_tenant_key)
    list_tenant_events = _async(calls.list_tenant_events)
    create_endpoint = _async(calls.create_endpoint)
    list_endpoints = _async(calls.list_endpoints)
    get_endpoint = _async(calls.get_endpoint)
    patch_endpoint = _async(calls.patch_endpoint)
    delete_endpoint = _async(calls.delete_endpoint)
    rotate_endpoint_secret = _async(calls.rotate_endpoint_secret)
    enable_endpoint = _async(calls.enable_endpoint)
    list_endpoint_events = _async(calls.list_endpoint_events)
    list_endpoint_attempts = _async(calls.list_endpoint_attempts)
    put_topic = _async(calls.put_topic)
    list_topics = _async(calls.list_topics)
    get_topic = _async(calls.get_topic)
    delete_topic = _async(calls.delete_topic)
    create_subscription = _async(calls.create_subscription)
    list_subscriptions = _async(calls.list_subscriptions)
    get_subscription = _async(calls.get_subscription)
    patch_subscription = _async(calls.patch_subscription)
    delete_subscription = _async(calls.delete_subscription)
    preview_trigger = _async(calls.preview_trigger)

    # every item of a list, following its cursors
    iter_schedules = _async_pages(calls.list_schedules)
    iter_occurrences = _async_pages(calls.list_occurrences)
    iter_events = _async_pages(calls.list_events)
    iter_attempts = _async_pages(calls.list_attempts)
    iter_dead_letters = _async_pages(calls.list_dead_letters)
    iter_flow_keys = _async_pages(calls.list_flow_keys)
    iter_waiting_occurrences = _async_pages(calls.list_waiting_occurrences)
    iter_tenants = _async_pages(calls.list_tenants)
    iter_tenant_events = _async_pages(calls.list_tenant_events)
    iter_endpoints = _async_pages(calls.list_endpoints)
    iter_endpoint_events = _async_pages(calls.list_endpoint_events)
    iter_endpoint_attempts = _async_pages(calls.list_endpoint_attempts)
    iter_topics = _async_pages(calls.list_topics)
    iter_subscriptions = _async_pages(calls.list_subscriptions)
