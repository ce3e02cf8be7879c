"""Endpoints' circuit breakers in the claim and the settle, on every store (DESIGN section
15): failures in a row open it; while open nothing of the endpoint is claimed and what waits
is not charged; after the cooldown one probe goes through, fleet-wide; a probe that fails
reopens it for twice the cooldown, one that succeeds closes it and the rest flow; an outage
past `disable_after_seconds` disables it until it is enabled."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

from app.domain.endpoints import CircuitEvent, CircuitSettings
from app.domain.flow import FlowLimits
from app.domain.occurrence import Delivery, OccurrenceStatus, Settlement
from app.domain.target import EndpointWebhook
from tests.store import ports
from tests.store.ports import Database

# A cooldown the clock is moved past (never waited for).
COOLDOWN = 30.0


async def _endpoint_with_work(
    database: Database, count: int, **settings: float | None
) -> tuple[uuid.UUID, list[uuid.UUID]]:
    """An endpoint and `count` one-shots to it, due already, the first the oldest."""
    circuit = CircuitSettings(
        **{"failure_threshold": 3, "cooldown_seconds": COOLDOWN, **settings}  # type: ignore[arg-type]
    )
    endpoint_id = await ports.make_endpoint(database, circuit=circuit)
    now = datetime.now(UTC)
    drafts = [
        ports.draft(
            ports.once(now - timedelta(seconds=60 - k)), target=ports.endpoint_target(endpoint_id)
        )
        for k in range(count)
    ]
    await ports.insert_schedules(database, drafts)
    return endpoint_id, [d.id for d in drafts]


def _failed(deliveries: list[Delivery]) -> list[Settlement]:
    return [
        Settlement(d, OccurrenceStatus.PENDING, error="HTTP 503", retry_in=1.0) for d in deliveries
    ]


def _delivered(deliveries: list[Delivery]) -> list[Settlement]:
    return [Settlement(d, OccurrenceStatus.DELIVERED) for d in deliveries]


async def _open(database: Database, endpoint_id: uuid.UUID) -> list[Delivery]:
    """Claim three attempts and fail them: the circuit opens."""
    first = await ports.claim(database, limit=3)
    assert len(first) == 3
    assert all(isinstance(d.target, EndpointWebhook) for d in first)
    settled = await ports.settled(database, _failed(first))
    assert [c.event for c in settled.circuits] == [CircuitEvent.OPENED]
    assert (await ports.read_endpoint(database, endpoint_id)).state.value == "open"
    return first


async def test_failures_in_a_row_open_the_circuit_and_what_waits_is_neither_claimed_nor_charged(
    database: Database,
) -> None:
    endpoint_id, _ = await _endpoint_with_work(database, 10)
    # Two failures, then a success: the count starts again.
    two = await ports.claim(database, limit=3)
    await ports.settle(database, [*_failed(two[:2]), *_delivered(two[2:])])
    endpoint = await ports.read_endpoint(database, endpoint_id)
    assert (endpoint.state.value, endpoint.circuit.failures) == ("closed", 0)

    opened = await _open(database, endpoint_id)
    endpoint = await ports.read_endpoint(database, endpoint_id)
    assert endpoint.circuit.failures == 3
    assert endpoint.circuit.probe_at is not None
    # Open: nothing of it is claimed, its retries neither, however long before the probe.
    ports.move_clock(database, timedelta(seconds=COOLDOWN / 2))
    assert await ports.claim(database, limit=20) == []
    # What waited was never attempted: its attempt count is untouched.
    waiting = await ports.read_occurrence_rows(database, None)
    attempted = {d.occurrence_id for d in [*two, *opened]}
    assert all(row.attempts == 0 for row in waiting if row.occurrence_id not in attempted)
    assert await ports.endpoint_event_kinds(database, endpoint_id) == ["created", "opened"]


async def test_after_the_cooldown_one_probe_goes_through_however_many_claim(
    database: Database, store_url: str
) -> None:
    endpoint_id, _ = await _endpoint_with_work(database, 10)
    await _open(database, endpoint_id)
    ports.move_clock(database, timedelta(seconds=COOLDOWN + 1))
    assert (await ports.read_endpoint(database, endpoint_id)).state.value == "half_open"
    claimers = [Database(store_url) for _ in range(4)]
    try:
        for claimer in claimers:
            claimer.clock.move(timedelta(seconds=COOLDOWN + 1))
        held: list[Delivery] = []
        for _ in range(3):
            rounds = await asyncio.gather(
                *(ports.claim(c, limit=10, owner=f"replica-{n}") for n, c in enumerate(claimers))
            )
            held += [d for batch in rounds for d in batch]
        assert len(held) == 1, f"{len(held)} probes at once"
    finally:
        for claimer in claimers:
            claimer.clock.reset()
            await claimer.close()
    # The probe succeeds: closed, and the rest flow.
    settled = await ports.settled(database, _delivered(held))
    assert [c.event for c in settled.circuits] == [CircuitEvent.RECOVERED]
    endpoint = await ports.read_endpoint(database, endpoint_id)
    assert (endpoint.state.value, endpoint.circuit.failures) == ("closed", 0)
    rest = await ports.claim(database, limit=20)
    assert len(rest) >= 6, len(rest)


async def test_a_failed_probe_reopens_it_for_twice_the_cooldown_up_to_the_maximum(
    database: Database,
) -> None:
    endpoint_id, _ = await _endpoint_with_work(database, 10, max_cooldown_seconds=COOLDOWN * 3)
    await _open(database, endpoint_id)
    cooldowns = []
    for _ in range(3):
        ports.move_clock(database, timedelta(seconds=COOLDOWN * 4))
        (probe,) = await ports.claim(database, limit=10)
        settled = await ports.settled(database, _failed([probe]))
        assert [c.event for c in settled.circuits] == [CircuitEvent.REOPENED]
        endpoint = await ports.read_endpoint(database, endpoint_id)
        assert endpoint.state.value == "open"
        cooldowns.append(endpoint.circuit.cooldown)
        assert await ports.claim(database, limit=10) == []
    assert cooldowns == [COOLDOWN * 2, COOLDOWN * 3, COOLDOWN * 3]


async def test_an_outage_past_disable_after_disables_it_until_it_is_enabled(
    database: Database,
) -> None:
    endpoint_id, _ = await _endpoint_with_work(database, 10, disable_after_seconds=COOLDOWN * 2)
    await _open(database, endpoint_id)
    ports.move_clock(database, timedelta(seconds=COOLDOWN * 3))
    (probe,) = await ports.claim(database, limit=10)
    settled = await ports.settled(database, _failed([probe]))
    assert [c.event for c in settled.circuits] == [CircuitEvent.DISABLED]
    assert (await ports.read_endpoint(database, endpoint_id)).state.value == "disabled"
    ports.move_clock(database, timedelta(hours=1))
    assert await ports.claim(database, limit=10) == []

    enabled = await ports.enable_endpoint(database, endpoint_id)
    assert (enabled.state.value, enabled.circuit.failures) == ("closed", 0)
    assert len(await ports.claim(database, limit=20)) >= 6
    assert await ports.endpoint_event_kinds(database, endpoint_id) == [
        "created",
        "opened",
        "disabled",
        "enabled",
    ]


async def test_healthy_endpoints_settle_without_a_write_of_their_key(database: Database) -> None:
    endpoint_id, _ = await _endpoint_with_work(database, 4)
    before = await ports.read_endpoint(database, endpoint_id)
    delivered = await ports.claim(database, limit=4)
    settled = await ports.settled(database, _delivered(delivered))
    assert settled.circuits == []
    after = await ports.read_endpoint(database, endpoint_id)
    assert after.circuit == before.circuit


async def test_an_endpoints_flow_limits_hold_its_deliveries_whoever_targets_it(
    database: Database,
) -> None:
    endpoint_id = await ports.make_endpoint(database, flow=FlowLimits(parallelism=2))
    now = datetime.now(UTC)
    drafts = [
        ports.draft(
            ports.once(now - timedelta(seconds=10 - k)), target=ports.endpoint_target(endpoint_id)
        )
        for k in range(6)
    ]
    await ports.insert_schedules(database, drafts)
    first = await ports.claim(database, limit=10)
    assert len(first) == 2
    assert await ports.claim(database, limit=10) == []
    endpoint = await ports.read_endpoint(database, endpoint_id)
    assert (endpoint.in_flight, endpoint.waiting) == (2, 4)
    await ports.settle(database, _delivered(first))
    assert len(await ports.claim(database, limit=10)) == 2


async def test_an_attempt_to_an_endpoint_that_is_gone_fails_as_an_unreadable_target(
    database: Database,
) -> None:
    endpoint_id = await ports.make_endpoint(database)
    now = datetime.now(UTC)
    draft = ports.draft(
        ports.once(now - timedelta(seconds=1)),
        target=ports.endpoint_target(endpoint_id),
        max_attempts=1,
    )
    await ports.insert_schedules(database, [draft])
    await ports.remove_endpoint_row(database, endpoint_id)
    assert await ports.claim(database, limit=1) == []
    (letter,) = await ports.dead_letters(database)
    assert f"endpoint {endpoint_id} no longer exists" in (letter.occurrence.last_error or "")
