"""The endpoint calls of the client against the app: an endpoint made with its secret shown
in that answer only, read, listed page after page, changed under its version, its secret
rotated, its circuit enabled, its events and its attempts read, and its removal refused
while a schedule targets it; the synchronous client over HTTP as well."""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
import uvicorn

from app.client import (
    AsyncClient,
    CircuitIn,
    Client,
    ConflictError,
    EndpointAttemptOut,
    EndpointIn,
    EndpointOut,
    EndpointPatch,
    FlowLimitsIn,
    NotFoundError,
    PreconditionFailedError,
    ValidationError,
    calls,
)
from tests.integration.conftest import Harness
from tests.receiver import Reply
from tests.waiting import eventually


@pytest.fixture
async def chronoq(harness: Harness) -> AsyncIterator[AsyncClient]:
    async with AsyncClient("http://localhost", transport=harness.transport) as client:
        yield client


@asynccontextmanager
async def served(harness: Harness) -> AsyncIterator[str]:
    """The harness's app over HTTP on a free port of 127.0.0.1, served on the test's event
    loop (where its database connections live), for a client or a command that runs in
    another thread; its address."""
    transport = harness.transport
    assert isinstance(transport, httpx.ASGITransport)
    config = uvicorn.Config(transport.app, lifespan="off", log_config=None, access_log=False)
    server = uvicorn.Server(config)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        try:
            await eventually(lambda: server.started, what="uvicorn started")
            yield f"http://127.0.0.1:{sock.getsockname()[1]}"
        finally:
            server.should_exit = True
            await serving


def endpoint(harness: Harness, path: str = "/endpoint", **extra: Any) -> dict[str, Any]:
    return {"url": harness.receiver.url(path), **extra}


def aimed_at(made: EndpointOut, **extra: Any) -> dict[str, Any]:
    """A schedule whose deliveries go to the endpoint `made`."""
    return {
        "event_type": "invoice.due",
        "target": {"type": "endpoint", "endpoint_id": str(made.id)},
        "trigger": {"type": "once", "delay_seconds": 3600},
        **extra,
    }


async def test_an_endpoint_is_made_read_listed_and_changed_under_its_version(
    harness: Harness, chronoq: AsyncClient
) -> None:
    made = await chronoq.create_endpoint(
        EndpointIn(
            url=harness.receiver.url("/endpoint"),
            name="billing",
            headers={"Authorization": "Bearer s3cret", "X-Team": "billing"},
            flow=FlowLimitsIn(rate=5, parallelism=2),
            circuit=CircuitIn(failure_threshold=3),
        )
    )
    assert isinstance(made, EndpointOut)
    (secret,) = made.signing_secrets
    assert secret.secret is not None
    assert secret.secret.startswith("whsec_")
    assert secret.hint == "whsec_…" + secret.secret[-4:]
    assert made.headers == {"Authorization": "***", "X-Team": "billing"}
    assert (made.state, made.version, made.circuit.failure_threshold) == ("closed", 1, 3)
    assert made.flow is not None
    assert (made.flow.rate, made.flow.parallelism) == (5, 2)

    read = await chronoq.get_endpoint(made.id)
    assert read.signing_secrets[0].secret is None
    assert read.model_dump(exclude={"signing_secrets"}) == made.model_dump(
        exclude={"signing_secrets"}
    )
    other = await chronoq.create_endpoint(endpoint(harness, "/other"))
    page = await chronoq.list_endpoints(limit=1)
    assert ([e.id for e in page.items], page.next_cursor is not None) == ([made.id], True)
    assert [e.id async for e in chronoq.iter_endpoints(limit=1)] == [made.id, other.id]
    listed = [e async for e in chronoq.iter_endpoints()]
    assert all(s.secret is None for e in listed for s in e.signing_secrets)

    with pytest.raises(PreconditionFailedError) as stale:
        await chronoq.patch_endpoint(made.id, {"timeout_seconds": 3}, if_match=made.version + 1)
    assert stale.value.status == 412
    # A null the patch sets is sent: the flow limits go.
    patched = await chronoq.patch_endpoint(
        made.id, EndpointPatch(timeout_seconds=3, flow=None), if_match=made.version
    )
    assert (patched.timeout_seconds, patched.flow, patched.version) == (3.0, None, 2)
    assert patched.circuit.failure_threshold == 3

    with pytest.raises(ValidationError) as refused:
        await chronoq.patch_endpoint(made.id, {"circuit": {"failure_threshold": 0}})
    assert [e.pointer for e in refused.value.errors] == ["#/circuit/failure_threshold"]
    with pytest.raises(NotFoundError):
        await chronoq.get_endpoint(uuid.uuid4())


async def test_a_rotation_shows_the_new_secret_in_its_answer_only(
    harness: Harness, chronoq: AsyncClient
) -> None:
    made = await chronoq.create_endpoint(endpoint(harness))
    (first,) = made.signing_secrets

    rotated = await chronoq.rotate_endpoint_secret(made.id, overlap_seconds=3600)

    old, new = rotated.signing_secrets
    assert (old.id, old.secret, old.hint) == (first.id, None, first.hint)
    assert old.expires_at is not None
    assert new.secret is not None
    assert new.secret.startswith("whsec_")
    assert new.secret != first.secret
    assert new.expires_at is None
    read = await chronoq.get_endpoint(made.id)
    assert [(s.hint, s.secret) for s in read.signing_secrets] == [
        (old.hint, None),
        (new.hint, None),
    ]
    # Without an overlap, the service's own: the live secrets sign on for a day.
    again = await chronoq.rotate_endpoint_secret(made.id)
    assert [s.secret is None for s in again.signing_secrets] == [True, True, False]
    expires = again.signing_secrets[1].expires_at
    assert expires is not None
    assert timedelta(hours=23) < expires - datetime.now(UTC) <= timedelta(days=1)
    with pytest.raises(ValidationError) as refused:
        await chronoq.rotate_endpoint_secret(made.id, overlap_seconds=-1)
    assert [e.pointer for e in refused.value.errors] == ["#/overlap_seconds"]


async def test_enable_closes_an_open_circuit_and_events_say_what_happened(
    harness: Harness, chronoq: AsyncClient
) -> None:
    harness.receiver.always("/down", Reply(503))
    made = await chronoq.create_endpoint(
        endpoint(harness, "/down", circuit={"failure_threshold": 1})
    )
    await chronoq.create_schedule(aimed_at(made, trigger={"type": "immediate"}, max_attempts=1))
    assert await harness.step() == 1
    opened = await chronoq.get_endpoint(made.id)
    assert (opened.state, opened.consecutive_failures) == ("open", 1)
    assert opened.next_probe_at is not None

    enabled = await chronoq.enable_endpoint(made.id)

    assert (enabled.state, enabled.consecutive_failures, enabled.next_probe_at) == (
        "closed",
        0,
        None,
    )
    await chronoq.patch_endpoint(made.id, {"name": "billing"})
    await chronoq.rotate_endpoint_secret(made.id, overlap_seconds=0)
    events = [e async for e in chronoq.iter_endpoint_events(made.id, limit=2)]
    assert [e.kind for e in events] == [
        "created",
        "opened",
        "enabled",
        "updated",
        "secret_rotated",
    ]
    assert {e.endpoint_id for e in events} == {made.id}
    assert events[3].detail == {"fields": ["name"]}
    first = await chronoq.list_endpoint_events(made.id, limit=1)
    assert [e.id for e in first.items] == [events[0].id]
    assert first.next_cursor is not None
    with pytest.raises(NotFoundError):
        await chronoq.list_endpoint_events(uuid.uuid4())


async def delivered_after_a_retry(harness: Harness, chronoq: AsyncClient) -> EndpointOut:
    """An endpoint whose one delivery was answered 503, then 200 when retried."""
    harness.receiver.script("/endpoint", Reply(503, body="busy"))
    made = await chronoq.create_endpoint(endpoint(harness))
    schedule = await chronoq.create_schedule(aimed_at(made, trigger={"type": "immediate"}))
    assert schedule.next_occurrence_id is not None
    occurrence_id = schedule.next_occurrence_id

    async def delivered() -> bool:
        return (await chronoq.get_occurrence(occurrence_id)).status == "delivered"

    await harness.step_until(delivered)
    return made


async def test_attempts_say_how_the_endpoint_answered_newest_first(
    harness: Harness, chronoq: AsyncClient
) -> None:
    made = await delivered_after_a_retry(harness, chronoq)

    page = await chronoq.list_endpoint_attempts(made.id)

    assert page.next_cursor is None
    newest, oldest = page.items
    assert isinstance(newest, EndpointAttemptOut)
    assert (newest.attempt, newest.outcome, newest.status_code, newest.error) == (
        2,
        "delivered",
        200,
        None,
    )
    assert (oldest.attempt, oldest.outcome, oldest.status_code) == (1, "retry", 503)
    assert oldest.error is not None
    assert "busy" in oldest.error
    assert newest.occurrence_id == oldest.occurrence_id
    assert newest.started_at >= oldest.started_at
    # The occurrence's own log holds the same attempts, oldest first.
    log = await chronoq.list_attempts(newest.occurrence_id)
    assert [a.model_dump() for a in log.items] == [
        a.model_dump(exclude={"occurrence_id"}) for a in (oldest, newest)
    ]
    first = await chronoq.list_endpoint_attempts(made.id, limit=1)
    assert ([a.attempt for a in first.items], first.next_cursor is not None) == ([2], True)
    rest = await chronoq.list_endpoint_attempts(made.id, limit=1, cursor=first.next_cursor)
    assert ([a.attempt for a in rest.items], rest.next_cursor) == ([1], None)
    assert [a.attempt async for a in chronoq.iter_endpoint_attempts(made.id, limit=1)] == [2, 1]

    other = await chronoq.create_endpoint(endpoint(harness, "/other"))
    assert (await chronoq.list_endpoint_attempts(other.id)).items == []
    with pytest.raises(NotFoundError) as missing:
        await chronoq.list_endpoint_attempts(uuid.uuid4())
    assert missing.value.status == 404


async def test_an_endpoint_is_removed_only_once_no_live_schedule_targets_it(
    harness: Harness, chronoq: AsyncClient
) -> None:
    made = await chronoq.create_endpoint(endpoint(harness))
    schedule = await chronoq.create_schedule(aimed_at(made))

    with pytest.raises(ConflictError) as refused:
        await chronoq.delete_endpoint(made.id)
    assert refused.value.status == 409
    assert str(schedule.id) in refused.value.detail

    await chronoq.cancel_schedule(schedule.id)
    with pytest.raises(PreconditionFailedError):
        await chronoq.delete_endpoint(made.id, if_match=made.version + 1)
    await chronoq.delete_endpoint(made.id, if_match=made.version)
    with pytest.raises(NotFoundError):
        await chronoq.get_endpoint(made.id)
    kinds = [e.kind async for e in chronoq.iter_endpoint_events(made.id)]
    assert kinds == ["created", "deleted"]


async def test_the_synchronous_client_has_the_same_calls(harness: Harness) -> None:
    async with served(harness) as url:

        def use() -> tuple[EndpointOut, EndpointOut, list[str], list[str]]:
            with Client(url, trust_env=False) as chronoq:
                made = chronoq.create_endpoint({"url": harness.receiver.url("/endpoint")})
                rotated = chronoq.rotate_endpoint_secret(made.id, overlap_seconds=0)
                chronoq.enable_endpoint(made.id)
                listed = [str(e.id) for e in chronoq.iter_endpoints()]
                chronoq.delete_endpoint(made.id)
                kinds: list[str] = [e.kind for e in chronoq.iter_endpoint_events(made.id)]
                return made, rotated, listed, kinds

        made, rotated, listed, kinds = await asyncio.to_thread(use)

    assert listed == [str(made.id)]
    assert [s.secret is None for s in rotated.signing_secrets] == [False]
    assert rotated.signing_secrets[0].secret != made.signing_secrets[0].secret
    assert kinds == ["created", "secret_rotated", "deleted"]


async def test_the_synchronous_client_reads_an_endpoints_attempts(
    harness: Harness, chronoq: AsyncClient
) -> None:
    made = await chronoq.create_endpoint(endpoint(harness))
    await chronoq.create_schedule(aimed_at(made, trigger={"type": "immediate"}))
    assert await harness.step() == 1

    async with served(harness) as url:

        def use() -> tuple[list[EndpointAttemptOut], list[EndpointAttemptOut]]:
            with Client(url, trust_env=False) as sync:
                page = sync.list_endpoint_attempts(made.id, limit=10)
                assert page.next_cursor is None
                every = list(sync.iter_endpoint_attempts(made.id))
                with pytest.raises(NotFoundError):
                    sync.list_endpoint_attempts(uuid.uuid4())
                return page.items, every

        items, every = await asyncio.to_thread(use)

    (attempt,) = items
    assert every == items
    assert (attempt.attempt, attempt.outcome, attempt.status_code) == (1, "delivered", 200)
    (received,) = harness.receiver.on("/endpoint")
    assert received.occurrence_id == str(attempt.occurrence_id)


def test_only_the_endpoint_calls_a_repeat_cannot_double_are_tried_again() -> None:
    some = uuid.uuid4()
    # A repeat of these would make a second endpoint or a second secret.
    assert not calls.create_endpoint({"url": "http://127.0.0.1/x"}).repeatable
    assert not calls.rotate_endpoint_secret(some).repeatable
    assert not calls.patch_endpoint(some, {"name": "x"}).repeatable
    assert calls.patch_endpoint(some, {"name": "x"}, if_match=3).headers == {"If-Match": '"3"'}
    assert calls.patch_endpoint(some, {"name": "x"}, if_match=3).repeatable
    assert calls.delete_endpoint(some).repeatable
    assert calls.get_endpoint(some).repeatable
    assert calls.list_endpoint_attempts(some).repeatable
    assert calls.list_endpoint_attempts(some, limit=5, cursor="c").params == (
        ("limit", "5"),
        ("cursor", "c"),
    )
    assert calls.list_endpoint_attempts(some).path == f"/v1/endpoints/{some}/attempts"
    assert calls.rotate_endpoint_secret(some).body == {}
    assert calls.rotate_endpoint_secret(some, overlap_seconds=0).body == {"overlap_seconds": 0}
