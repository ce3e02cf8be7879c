"""The attempt log (DESIGN 9): every attempt of an occurrence, oldest first, over HTTP."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from app.domain.occurrence import Settlement
from app.store.engine.wakeups import Wakeups
from app.store.loop.queue import DeliveryQueue
from app.store.records.retention import prune
from app.store.schema.tables import attempts, occurrences, schedules
from tests.integration.conftest import Harness
from tests.receiver import Reply
from tests.store import ports


async def _attempts(harness: Harness, occurrence_id: str) -> list[dict[str, Any]]:
    page = await harness.get(f"/v1/occurrences/{occurrence_id}/attempts")
    assert page["next_cursor"] is None
    items: list[dict[str, Any]] = page["items"]
    return items


async def _occurrence(harness: Harness, occurrence_id: str) -> dict[str, Any]:
    return await harness.get(f"/v1/occurrences/{occurrence_id}")


async def _settled(harness: Harness, occurrence_id: str, status: str) -> bool:
    return bool((await _occurrence(harness, occurrence_id))["status"] == status)


async def _claim_and_crash(harness: Harness, lease: float) -> None:
    """A replica that claims what is due and dies before delivering or settling any of it."""
    crashed = DeliveryQueue(harness.database, Wakeups())
    claimed = await crashed.claim(limit=10, lease=lease, owner="crashed", backoff=lambda _: 0.05)
    assert len(claimed.deliveries) == 1


async def _lease_ran_out(harness: Harness, lease: float) -> None:
    """Let a lease of `lease` seconds taken before this call run out: the database clock
    the claims read moves past its end."""
    end = await ports.database_now(harness.database) + timedelta(seconds=lease)
    await ports.move_clock_past(harness.database, end)


async def test_a_retried_then_delivered_webhook_shows_both_attempts_with_status_and_excerpt(
    harness: Harness,
) -> None:
    harness.receiver.script("/hook", Reply(503, body="busy, try later"), Reply(200, body="ok"))
    created = await harness.create()
    occurrence_id = created["next_occurrence_id"]

    await harness.step_until(lambda: _settled(harness, occurrence_id, "delivered"))

    first, second = await _attempts(harness, occurrence_id)
    assert first["attempt"] == 1
    assert first["outcome"] == "retry"
    assert first["status_code"] == 503
    assert first["error"] == "HTTP 503: busy, try later"
    assert first["response_excerpt"] == "busy, try later"
    assert first["replica"] == "test"
    assert second["attempt"] == 2
    assert second["outcome"] == "delivered"
    assert second["status_code"] == 200
    assert second["error"] is None
    assert second["response_excerpt"] == "ok"
    for attempt in (first, second):
        assert isinstance(attempt["duration_ms"], int)
        assert 0 <= attempt["duration_ms"] < 2000
    assert first["started_at"] < second["started_at"]
    occurrence = await _occurrence(harness, occurrence_id)
    assert occurrence["schedule_id"] == created["id"]
    assert occurrence["attempts"] == 2
    assert occurrence["last_error"] is None


async def test_the_occurrence_reads_as_it_does_in_its_schedule_history(harness: Harness) -> None:
    created = await harness.create()
    await harness.step()

    (listed,) = await harness.occurrences(created["id"])

    assert await _occurrence(harness, created["next_occurrence_id"]) == listed


async def test_a_permanent_failure_is_one_dead_lettered_attempt(harness: Harness) -> None:
    harness.receiver.always("/hook", Reply(400, body="bad payload"))
    created = await harness.create()
    occurrence_id = created["next_occurrence_id"]

    await harness.step()

    (attempt,) = await _attempts(harness, occurrence_id)
    assert attempt["outcome"] == "dead_lettered"
    assert attempt["status_code"] == 400
    assert attempt["error"] == "HTTP 400: bad payload"
    assert attempt["response_excerpt"] == "bad payload"
    assert (await _occurrence(harness, occurrence_id))["last_error"] == "HTTP 400: bad payload"


async def test_the_excerpt_keeps_the_first_kibibyte_of_the_reply(harness: Harness) -> None:
    harness.receiver.always("/hook", Reply(500, body="é" + "x" * 5000))
    created = await harness.create(max_attempts=1)

    await harness.step()

    (attempt,) = await _attempts(harness, created["next_occurrence_id"])
    assert attempt["response_excerpt"] == "é" + "x" * 1022  # 1024 bytes: é is two
    assert attempt["error"] == "HTTP 500: é" + "x" * 254


async def test_an_attempt_whose_replica_died_shows_as_lease_expired_after_the_reclaim(
    harness: Harness,
) -> None:
    created = await harness.create()
    occurrence_id = created["next_occurrence_id"]
    await _claim_and_crash(harness, lease=0.3)
    await _lease_ran_out(harness, 0.3)

    assert await harness.step() == 1

    lost, delivered = await _attempts(harness, occurrence_id)
    assert lost["attempt"] == 1
    assert lost["outcome"] == "lease_expired"
    assert lost["replica"] == "crashed"
    assert lost["status_code"] is None
    assert lost["response_excerpt"] is None
    assert "lease expired" in lost["error"]
    # Its lease's length: how long the occurrence was held with no result.
    assert 250 <= lost["duration_ms"] <= 350
    assert delivered["attempt"] == 2
    assert delivered["outcome"] == "delivered"
    assert delivered["replica"] == "test"
    assert lost["started_at"] < delivered["started_at"]
    assert len(harness.receiver.requests) == 1


async def test_the_lease_exhausted_dead_letter_records_its_lost_attempt(
    harness: Harness,
) -> None:
    created = await harness.create(max_attempts=1)
    occurrence_id = created["next_occurrence_id"]
    await _claim_and_crash(harness, lease=0.2)
    await _lease_ran_out(harness, 0.2)

    assert await harness.step() == 0  # dead-lettered by the claim, nothing delivered

    (lost,) = await _attempts(harness, occurrence_id)
    assert lost["attempt"] == 1
    assert lost["outcome"] == "lease_expired"
    assert lost["replica"] == "crashed"
    occurrence = await _occurrence(harness, occurrence_id)
    assert occurrence["status"] == "dead_lettered"
    assert occurrence["attempts"] == 1


async def test_a_late_settle_after_the_reclaim_adds_no_attempt(harness: Harness) -> None:
    """The replica was only slow: its lease ran out, another claim took the occurrence,
    and its settle arrives afterwards. The log keeps lease_expired for it."""
    created = await harness.create()
    occurrence_id = created["next_occurrence_id"]
    slow = DeliveryQueue(harness.database, Wakeups())
    (delivery,) = (
        await slow.claim(limit=1, lease=0.2, owner="slow", backoff=lambda _: 0.05)
    ).deliveries
    await _lease_ran_out(harness, 0.2)
    assert await harness.step() == 1
    late = await harness.dispatcher.attempt(delivery)
    assert isinstance(late, Settlement)

    await slow.settle([late])

    assert [a["outcome"] for a in await _attempts(harness, occurrence_id)] == [
        "lease_expired",
        "delivered",
    ]


async def test_a_replay_keeps_the_earlier_attempts_and_starts_counting_again(
    harness: Harness,
) -> None:
    harness.receiver.script("/hook", Reply(503), Reply(503))
    created = await harness.create(max_attempts=2)
    occurrence_id = created["next_occurrence_id"]
    await harness.step_until(lambda: _settled(harness, occurrence_id, "dead_lettered"))

    replayed = await harness.client.post(f"/v1/dead-letters/{occurrence_id}/replay")
    assert replayed.status_code == 202, replayed.text
    await harness.step_until(lambda: _settled(harness, occurrence_id, "delivered"))

    history = await _attempts(harness, occurrence_id)
    assert [(a["attempt"], a["outcome"], a["status_code"]) for a in history] == [
        (1, "retry", 503),
        (2, "dead_lettered", 503),
        (1, "delivered", 200),
    ]


async def test_attempts_page_oldest_first_with_a_cursor(harness: Harness) -> None:
    harness.receiver.script("/hook", Reply(503), Reply(502))
    created = await harness.create()
    occurrence_id = created["next_occurrence_id"]
    await harness.step_until(lambda: _settled(harness, occurrence_id, "delivered"))

    seen: list[int] = []
    cursor: str | None = None
    while True:
        query = "?limit=1" + (f"&cursor={cursor}" if cursor else "")
        page = await harness.get(f"/v1/occurrences/{occurrence_id}/attempts{query}")
        seen += [a["attempt"] for a in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break

    assert seen == [1, 2, 3]


async def test_an_occurrence_not_yet_attempted_has_no_attempts(harness: Harness) -> None:
    created = await harness.create()

    assert await _attempts(harness, created["next_occurrence_id"]) == []


async def test_an_unknown_occurrence_is_a_404_problem(harness: Harness) -> None:
    unknown = uuid.uuid4()
    for path in (f"/v1/occurrences/{unknown}", f"/v1/occurrences/{unknown}/attempts"):
        response = await harness.client.get(path)

        assert response.status_code == 404, response.text
        assert response.headers["content-type"] == "application/problem+json"
        assert str(unknown) in response.json()["detail"]


async def test_a_malformed_id_or_cursor_is_a_422_problem(harness: Harness) -> None:
    created = await harness.create()
    for path in (
        "/v1/occurrences/not-a-uuid",
        "/v1/occurrences/not-a-uuid/attempts",
        f"/v1/occurrences/{created['next_occurrence_id']}/attempts?cursor=garbage",
    ):
        response = await harness.client.get(path)

        assert response.status_code == 422, response.text
        assert response.headers["content-type"] == "application/problem+json"


async def test_pruning_an_occurrence_removes_its_attempts(harness: Harness) -> None:
    harness.receiver.script("/hook", Reply(503))
    created = await harness.create()
    occurrence_id = created["next_occurrence_id"]
    await harness.step_until(lambda: _settled(harness, occurrence_id, "delivered"))
    assert len(await _attempts(harness, occurrence_id)) == 2

    async def age_and_prune(conn: Any) -> int:
        old = datetime.now(UTC) - timedelta(days=30)
        await conn.execute(occurrences.update().values(updated_at=old))
        return await prune(conn, older_than=datetime.now(UTC) - timedelta(days=7), limit=100)

    assert await harness.database.run(age_and_prune) == 1

    response = await harness.client.get(f"/v1/occurrences/{occurrence_id}/attempts")
    assert response.status_code == 404

    async def count(conn: Any) -> int:
        return int((await conn.execute(sa.select(sa.func.count()).select_from(attempts))).scalar())

    # Gone with the occurrence, or on PostgreSQL with their day (its partition).
    await ports.drop_history(harness.database, older_than=datetime.now(UTC) + timedelta(days=2))
    assert await harness.database.run(count) == 0


async def test_a_row_that_cannot_be_planned_records_its_failed_attempts(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(max_attempts=2) as harness:
        created = await harness.create()
        occurrence_id = created["next_occurrence_id"]
        async with harness.database.engine.begin() as conn:
            await conn.execute(
                schedules.update()
                .where(schedules.c.id == uuid.UUID(created["id"]))
                .values(trigger={"type": "lunar", "phase": "full"})
            )

        await harness.step_until(lambda: _settled(harness, occurrence_id, "dead_lettered"))

        history = await _attempts(harness, occurrence_id)
        assert [(a["attempt"], a["outcome"]) for a in history] == [
            (1, "retry"),
            (2, "dead_lettered"),
        ]
        for attempt in history:
            assert attempt["error"].startswith("cannot plan this occurrence: ")
            assert attempt["status_code"] is None
            assert attempt["duration_ms"] == 0
            assert attempt["replica"] == "test"
        assert harness.receiver.requests == []


async def test_an_attempt_cut_off_by_a_stop_is_recorded_when_it_is_handed_back(
    harness: Harness,
) -> None:
    created = await harness.create()
    occurrence_id = created["next_occurrence_id"]
    stopping = DeliveryQueue(harness.database, Wakeups())
    claimed = await stopping.claim(limit=1, lease=30.0, owner="stopping", backoff=lambda _: 0.05)

    await stopping.release(claimed.deliveries, started=True)
    assert await harness.step() == 1

    cut, delivered = await _attempts(harness, occurrence_id)
    assert cut["attempt"] == 1
    assert cut["outcome"] == "lease_expired"
    assert cut["replica"] == "stopping"
    assert "stopped" in cut["error"]
    assert delivered["attempt"] == 2
    assert delivered["outcome"] == "delivered"


async def test_an_occurrence_handed_back_unstarted_has_no_attempt(harness: Harness) -> None:
    created = await harness.create()
    occurrence_id = created["next_occurrence_id"]
    early = DeliveryQueue(harness.database, Wakeups())
    claimed = await early.claim(limit=1, lease=30.0, owner="early", backoff=lambda _: 0.05)

    await early.release(claimed.deliveries, started=False)
    assert await harness.step() == 1

    (delivered,) = await _attempts(harness, occurrence_id)
    assert delivered["attempt"] == 1
    assert delivered["outcome"] == "delivered"
