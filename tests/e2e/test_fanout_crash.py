"""Fan-out through a crash (DESIGN section 15): two replicas on PostgreSQL fan a topic's
occurrences out to five subscribers each; one is killed in the middle of it. No delivery is
lost, and none is sent twice but what the killed replica had in flight (at least once, a
window at most); every delivery keeps its id across the crash."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from typing import Any

import httpx
import pytest

from app.worker.dispatcher import UNRECORDED_WINDOWS
from tests.e2e.processes import Services
from tests.receiver import Receiver, Reply

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

OCCURRENCES = 100
SUBSCRIBERS = 5
SPREAD_SECONDS = 2.0
REPLY_DELAY = 0.2
KILL_AFTER = 150
CONCURRENCY = 16
LEASE = 3.0
TIMEOUT = 60.0


def settings(database_url: str) -> dict[str, str]:
    return {
        "DATABASE_URL": database_url,
        "CHRONOQ_LEASE": str(LEASE),
        "CHRONOQ_DISPATCH_TIMEOUT": "2",
        "CHRONOQ_CONCURRENCY": str(CONCURRENCY),
        "CHRONOQ_POLL_INTERVAL": "0.05",
        "CHRONOQ_LOG_LEVEL": "INFO",
    }


def _delivered(receiver: Receiver) -> Counter[str]:
    return Counter(
        r.headers["Idempotency-Key"] for n in range(SUBSCRIBERS) for r in receiver.on(f"/hook-{n}")
    )


async def test_a_replica_killed_mid_fan_out_loses_no_delivery(
    postgres_url: str, receiver: Receiver, services: Services
) -> None:
    for n in range(SUBSCRIBERS):
        receiver.always(f"/hook-{n}", Reply(delay=REPLY_DELAY))
    victim, survivor = [
        await services.start(f"fanout-replica-{i}", settings(postgres_url)) for i in range(2)
    ]
    async with httpx.AsyncClient(trust_env=False, timeout=30.0) as client:
        base = victim.base_url
        assert (await client.put(f"{base}/v1/topics/billing", json={})).status_code == 201
        subscriptions = []
        for n in range(SUBSCRIBERS):
            endpoint = await client.post(
                f"{base}/v1/endpoints", json={"url": receiver.url(f"/hook-{n}")}
            )
            made = await client.post(
                f"{base}/v1/subscriptions",
                json={"topic": "billing", "endpoint_id": endpoint.json()["id"]},
            )
            assert made.status_code == 201, made.text
            subscriptions.append(made.json()["id"])
        items: list[dict[str, Any]] = [
            {
                "event_type": "e2e.fanout",
                "payload": {"n": n},
                "target": {"type": "topic", "topic": "billing"},
                "trigger": {
                    "type": "once",
                    "delay_seconds": round(n * SPREAD_SECONDS / OCCURRENCES, 3),
                },
            }
            for n in range(OCCURRENCES)
        ]
        created = await client.post(f"{base}/v1/schedules/batch", json={"items": items})
        assert created.status_code == 201, created.text
        occurrences = [item["next_occurrence_id"] for item in created.json()["items"]]
        expected = {str(uuid.uuid5(uuid.UUID(o), s)) for o in occurrences for s in subscriptions}

        deadline = time.monotonic() + TIMEOUT
        while sum(_delivered(receiver).values()) < KILL_AFTER:
            assert time.monotonic() < deadline, services.logs()
            await _pause()
        killed_at = time.time()
        services.kill(victim)
        assert set(_delivered(receiver)) < expected, "all arrived before the kill: raise the load"
        await services.start("fanout-replica-0-again", settings(postgres_url))

        deadline = time.monotonic() + TIMEOUT
        while not expected <= set(_delivered(receiver)):
            assert time.monotonic() < deadline, (
                f"{len(expected - set(_delivered(receiver)))} deliveries lost\n{services.logs()}"
            )
            await _pause()
        counts = _delivered(receiver)
        assert set(counts) == expected  # nothing but the expected deliveries
        extra = sum(counts.values()) - len(counts)
        assert extra <= UNRECORDED_WINDOWS * CONCURRENCY, f"{extra} sent twice"
        # Only what the killed replica had sent is sent again.
        first: dict[str, float] = {}
        for n in range(SUBSCRIBERS):
            for r in receiver.on(f"/hook-{n}"):
                key = r.headers["Idempotency-Key"]
                first[key] = min(first.get(key, r.at), r.at)
        late = [key for key, n in counts.items() if n > 1 and first[key] > killed_at + LEASE / 2]
        assert late == [], f"{len(late)} deliveries first sent after the kill arrived twice"
        # Each occurrence fanned out once: five deliveries, whichever replica claimed it.
        one = await client.get(f"{survivor.base_url}/v1/occurrences/{occurrences[0]}")
        assert len(one.json()["deliveries"]) == SUBSCRIBERS, one.text


async def _pause() -> None:
    await asyncio.sleep(0.1)
