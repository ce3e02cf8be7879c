"""SIGTERM under load: the replica stops claiming, lets its in-flight deliveries finish,
hands back what it claimed but had not started (due now, attempt not counted) so the other
replica takes it at once, and exits by itself. Nothing is lost and nothing arrives twice.

Also: an API-only replica (CHRONOQ_WORKER_ENABLED=false) serves the API and delivers
nothing, and cursors and idempotency keys work across replicas.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tests.e2e.processes import Services
from tests.receiver import Receiver, Reply
from tests.waiting import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

SCHEDULES = 600
SPREAD_SECONDS = 3.0
REPLY_DELAY = 0.2  # keeps a full in-flight window when the signal lands
DISPATCH_TIMEOUT = 3.0
LEASE = 20.0  # far longer than the test: an occurrence that waited for it was not released


def settings(database_url: str, **extra: str) -> dict[str, str]:
    return {
        "DATABASE_URL": database_url,
        "CHRONOQ_LEASE": str(LEASE),
        "CHRONOQ_DISPATCH_TIMEOUT": str(DISPATCH_TIMEOUT),
        "CHRONOQ_CONCURRENCY": "32",
        "CHRONOQ_BATCH_SIZE": "50",
        "CHRONOQ_POLL_INTERVAL": "5",  # wake-ups, not polling, must bring the hand-back over
        **extra,
    }


def _item(receiver: Receiver, n: int) -> dict[str, Any]:
    return {
        "event_type": "e2e.sigterm",
        "payload": {"n": n},
        "target": {"type": "webhook", "url": receiver.url("/hook")},
        "trigger": {"type": "once", "delay_seconds": round(n * SPREAD_SECONDS / SCHEDULES, 3)},
    }


# MySQL too: its replicas hear no announcements from each other; the survivor's own claims
# (and its polls) bring the handed-back occurrences over.
@pytest.mark.parametrize("database_url", ["postgresql", "mysql"], indirect=True)
async def test_sigterm_under_load_loses_nothing_and_delivers_nothing_twice(
    database_url: str, receiver: Receiver, services: Services
) -> None:
    receiver.always("/hook", Reply(delay=REPLY_DELAY))
    # Started side by side: each start is mostly the process's imports.
    stopping, survivor = await asyncio.gather(
        services.start("replica-json", settings(database_url, CHRONOQ_LOG_FORMAT="json")),
        services.start("replica-text", settings(database_url)),
    )
    async with httpx.AsyncClient(trust_env=False, timeout=30.0) as client:
        response = await client.post(
            f"{survivor.base_url}/v1/schedules/batch",
            json={"items": [_item(receiver, n) for n in range(SCHEDULES)]},
        )
        assert response.status_code == 201, response.text
        expected = {item["next_occurrence_id"] for item in response.json()["items"]}
        await receiver.wait_for(SCHEDULES // 4, path="/hook", timeout=30.0)

        signalled = time.monotonic()
        code = await services.stop(stopping, timeout=DISPATCH_TIMEOUT + 5)
        stopped_in = time.monotonic() - signalled

        await _arrivals(receiver, SCHEDULES, services)
        await _wait_all_completed(client, survivor.base_url)

    log = stopping.log_tail(200)
    requests = receiver.on("/hook")
    counts = Counter(r.occurrence_id for r in requests)
    lateness = sorted(
        r.at - datetime.fromisoformat(r.headers["X-Scheduled-For"]).timestamp() for r in requests
    )
    sys.stdout.write(
        f"\nsigterm: stopped in {stopped_in:.2f}s (exit {code}), received {len(requests)}, "
        f"unique {len(counts)}, duplicates {len(requests) - len(counts)}, lateness p50 "
        f"{lateness[len(lateness) // 2]:.3f}s max {lateness[-1]:.3f}s\n"
    )
    assert code in (0, -signal.SIGTERM), log
    lines = log.splitlines()[1:]  # after log_tail's own header line
    events = [json.loads(line) for line in lines if line.strip()]  # JSON throughout
    assert "Application shutdown complete." in [e["message"] for e in events], log
    assert stopped_in < DISPATCH_TIMEOUT + 3
    assert set(counts) == expected
    assert len(requests) == len(counts), "an occurrence arrived twice"
    assert {r.headers["X-Attempt"] for r in requests} == {"1"}  # a hand-back is not an attempt
    # Handed back, not left to the lease: every occurrence arrived long before it ran out.
    assert lateness[-1] < LEASE / 2


async def _arrivals(receiver: Receiver, count: int, services: Services) -> None:
    try:
        await receiver.wait_for(count, path="/hook", timeout=30.0)
    except TimeoutError:
        arrived = len(receiver.on("/hook"))
        pytest.fail(f"{arrived} of {count} deliveries arrived\n{services.logs()}")


async def _wait_all_completed(client: httpx.AsyncClient, base_url: str) -> None:
    async def none_pending() -> bool:
        page = (await client.get(f"{base_url}/v1/schedules", params={"status": "pending"})).json()
        return not page["items"]

    await eventually(none_pending, within=30, every=0.2, what="no schedule pending")


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
async def test_an_api_only_replica_delivers_nothing_and_replicas_share_cursors_and_keys(
    database_url: str, receiver: Receiver, services: Services
) -> None:
    api_only = await services.start(
        "api-only", settings(database_url, CHRONOQ_WORKER_ENABLED="false")
    )
    async with httpx.AsyncClient(trust_env=False, timeout=30.0) as client:
        body = {
            "event_type": "e2e.roles",
            "target": {"type": "webhook", "url": receiver.url("/hook")},
            "trigger": {"type": "immediate"},
        }
        first = await client.post(
            f"{api_only.base_url}/v1/schedules", json=body, headers={"Idempotency-Key": "k-1"}
        )
        assert first.status_code == 201, first.text
        for n in range(4):
            more = await client.post(
                f"{api_only.base_url}/v1/schedules",
                json={**body, "trigger": {"type": "once", "at": _in(hours=1 + n)}},
            )
            assert more.status_code == 201
        await asyncio.sleep(1.5)
        assert receiver.on("/hook") == []  # no loop on this replica
        ready = (await client.get(f"{api_only.base_url}/readyz")).json()
        assert ready["checks"].get("worker") in (None, "disabled"), ready

        worker = await services.start("worker", settings(database_url))
        await _arrivals(receiver, 1, services)

        again = await client.post(
            f"{worker.base_url}/v1/schedules", json=body, headers={"Idempotency-Key": "k-1"}
        )
        assert again.status_code == 200
        assert again.json()["id"] == first.json()["id"]

        page_one = (
            await client.get(f"{api_only.base_url}/v1/schedules", params={"limit": 2})
        ).json()
        page_two = (
            await client.get(
                f"{worker.base_url}/v1/schedules",
                params={"limit": 10, "cursor": page_one["next_cursor"]},
            )
        ).json()
        ids = [s["id"] for s in page_one["items"] + page_two["items"]]
        assert len(ids) == len(set(ids)) == 5


def _in(hours: int) -> str:
    return (datetime.now(UTC) + timedelta(hours=hours)).isoformat()
