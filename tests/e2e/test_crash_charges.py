"""A replica killed in a burst charges only the attempts it had started: what its claims
held waiting behind its deliveries in flight is claimed again with its attempt intact, so
an occurrence allowed a single attempt is never dead-lettered without having been sent."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from app.worker.dispatcher import MARK_AHEAD_SHARE
from tests.conftest import STORES
from tests.e2e.processes import Services
from tests.receiver import Receiver, Reply

pytestmark = pytest.mark.e2e

ONE_SHOTS = 600
APART = 0.01  # one-shots due 10 ms apart: 100 a second
# Four slots and replies that take 0.1 s: 40 a second, so the burst backs up behind the
# deliveries in flight, in the lanes (up to CONCURRENCY + 2 x BATCH) and claimed ahead.
CONCURRENCY = 4
BATCH = 100
REPLY_DELAY = 0.1
KILL_AFTER = 60  # deliveries arrived before the kill: the backlog is about as long by then
LEASE = 3.0
# What a crash may charge without a send: the attempts marked started and not yet sent.
# The deliveries in flight (at most CONCURRENCY); the starts marked ahead of a free slot (at
# most MARK_AHEAD_SHARE of the window); and what the free slots let start
# besides: a claim's rows when it found no more than the free slots, a claim ahead's marks
# up to the free slots, which a claim and a mark running at once may each count, so
# CONCURRENCY more at most. What waits beyond that is not marked, and costs nothing.
STARTED_BOUND = 2 * CONCURRENCY + int(CONCURRENCY * MARK_AHEAD_SHARE)
TIMEOUT = 60.0


def settings(database_url: str, concurrency: int) -> dict[str, str]:
    return {
        "DATABASE_URL": database_url,
        "CHRONOQ_LEASE": str(LEASE),
        "CHRONOQ_DISPATCH_TIMEOUT": "2",
        "CHRONOQ_CONCURRENCY": str(concurrency),
        "CHRONOQ_BATCH_SIZE": str(BATCH),
        "CHRONOQ_POLL_INTERVAL": "0.05",
        "CHRONOQ_LOG_LEVEL": "INFO",
    }


def one_shot(receiver: Receiver, n: int) -> dict[str, Any]:
    return {
        "event_type": "e2e.crash_charges",
        "payload": {"n": n},
        "target": {"type": "webhook", "url": receiver.url("/hook")},
        "trigger": {"type": "once", "delay_seconds": round(1.0 + n * APART, 3)},
        "max_attempts": 1,
    }


async def dead_lettered(client: httpx.AsyncClient, base_url: str) -> set[str]:
    ids: set[str] = set()
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 500} | ({"cursor": cursor} if cursor else {})
        response = await client.get(f"{base_url}/v1/dead-letters", params=params)
        assert response.status_code == 200, response.text
        page = response.json()
        ids.update(item["occurrence_id"] for item in page["items"])
        cursor = page["next_cursor"]
        if cursor is None:
            return ids


@pytest.mark.parametrize("database_url", [STORES[1]], indirect=True)
async def test_a_replica_killed_in_a_burst_dead_letters_only_what_it_had_started(
    database_url: str, receiver: Receiver, services: Services
) -> None:
    receiver.always("/hook", Reply(delay=REPLY_DELAY))
    victim = await services.start("pg-burst-victim", settings(database_url, CONCURRENCY))
    async with httpx.AsyncClient(trust_env=False, timeout=30.0) as client:
        response = await client.post(
            f"{victim.base_url}/v1/schedules/batch",
            json={"items": [one_shot(receiver, n) for n in range(ONE_SHOTS)]},
        )
        assert response.status_code == 201, response.text
        occurrences = {item["next_occurrence_id"] for item in response.json()["items"]}
        assert len(occurrences) == ONE_SHOTS

        await receiver.wait_for(KILL_AFTER, path="/hook", timeout=TIMEOUT)
        services.kill(victim)
        killed_at = time.time()
        arrived_at_kill = len(receiver.on("/hook"))
        assert arrived_at_kill < ONE_SHOTS // 2, "the burst was over before the kill"

        # The survivor: quick replies and room enough to clear the rest at once.
        receiver.always("/hook", Reply())
        survivor = await services.start("pg-burst-survivor", settings(database_url, 64))
        dead: set[str] = set()
        deadline = time.monotonic() + TIMEOUT
        while True:
            dead = await dead_lettered(client, survivor.base_url)
            received = {r.occurrence_id for r in receiver.on("/hook")}
            if occurrences <= received | dead:
                break
            assert time.monotonic() < deadline, (
                f"{len(occurrences - received - dead)} occurrences neither arrived nor were "
                f"dead-lettered\n{services.logs()}"
            )
            await asyncio.sleep(0.2)

    never_sent = dead - received
    print(  # noqa: T201
        f"\narrived before the kill: {arrived_at_kill}; after: "
        f"{sum(1 for r in receiver.on('/hook') if r.at > killed_at)}; dead-lettered: "
        f"{len(dead)}, of which never arrived: {len(never_sent)}"
    )
    assert len(never_sent) <= STARTED_BOUND, (
        f"{len(never_sent)} occurrences were dead-lettered without ever arriving, more than "
        f"the {STARTED_BOUND} a crash can have started and not sent"
    )
