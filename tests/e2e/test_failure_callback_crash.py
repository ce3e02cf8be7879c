"""A failure callback survives its replica: killed while the callback is in flight, the
replica's lease runs out and the next one delivers the callback again under the same id."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.e2e.processes import Services
from tests.receiver import Receiver, Reply
from tests.waiting import eventually, eventually_found

pytestmark = pytest.mark.e2e

LEASE = 3.0
TIMEOUT = 60.0
HOLD = 4.0


def settings(database_url: str) -> dict[str, str]:
    return {
        "DATABASE_URL": database_url,
        "CHRONOQ_LEASE": str(LEASE),
        "CHRONOQ_DISPATCH_TIMEOUT": "2",
        "CHRONOQ_POLL_INTERVAL": "0.05",
        "CHRONOQ_LOG_LEVEL": "INFO",
    }


@pytest.mark.parametrize(
    "database_url", [pytest.param("postgresql", marks=pytest.mark.postgres)], indirect=True
)
async def test_a_callback_in_flight_when_its_replica_dies_is_delivered_by_the_next(
    database_url: str, receiver: Receiver, services: Services
) -> None:
    receiver.always("/bad", Reply(410))
    # Holds the callback in flight past the replica's 2 s dispatch timeout; the replica is
    # killed long before that.
    receiver.always("/alerts", Reply(delay=HOLD))
    victim = await services.start("callback-replica", settings(database_url))

    async with httpx.AsyncClient(trust_env=False, timeout=30.0) as client:
        response = await client.post(
            f"{victim.base_url}/v1/schedules",
            json={
                "event_type": "e2e.callback",
                "payload": {"n": 1},
                "target": {"type": "webhook", "url": receiver.url("/bad")},
                "trigger": {"type": "immediate"},
                "on_failure": {"type": "webhook", "url": receiver.url("/alerts")},
            },
        )
        assert response.status_code == 201, response.text
        schedule_id = response.json()["id"]
        occurrences = f"{victim.base_url}/v1/schedules/{schedule_id}/occurrences"

        async def in_flight() -> dict[str, Any] | None:
            # Claimed (its attempt counted) and not settled: the receiver is holding it.
            listed = (await client.get(occurrences)).json()["items"]
            return next(
                (
                    o
                    for o in listed
                    if o["origin"] == "callback" and o["status"] == "pending" and o["attempts"]
                ),
                None,
            )

        held = await eventually_found(
            in_flight, within=TIMEOUT, what="the callback's first attempt", details=services.logs
        )
        # Counted at its start, the attempt may not have reached the receiver yet on a loaded
        # machine: the replica dies once the receiver holds it.
        await eventually(
            lambda: any(r.path == "/alerts" for r in receiver.arrivals),
            within=TIMEOUT,
            what="the callback at the receiver",
        )
        services.kill(victim)

        receiver.always("/alerts", Reply())
        survivor = await services.start("callback-replica-next", settings(database_url))
        # The attempt the killed replica made (recorded once its reply is sent), and the
        # next replica's, under the same id.
        sent = await receiver.wait_for(2, path="/alerts", timeout=TIMEOUT)
        assert {r.occurrence_id for r in sent} == {held["occurrence_id"]}
        assert {r.headers["X-Event-Type"] for r in sent} == {"chronoq.dead_lettered"}

        async def delivered() -> dict[str, Any] | None:
            listed = await client.get(f"{survivor.base_url}/v1/schedules/{schedule_id}/occurrences")
            callbacks = [o for o in listed.json()["items"] if o["origin"] == "callback"]
            return callbacks[0] if callbacks and callbacks[0]["status"] == "delivered" else None

        callback = await eventually_found(
            delivered, within=TIMEOUT, what="the callback's settle", details=services.logs
        )
        assert callback["occurrence_id"] == held["occurrence_id"]
        attempts = await client.get(
            f"{survivor.base_url}/v1/occurrences/{callback['occurrence_id']}/attempts"
        )
        assert attempts.status_code == 200, attempts.text
        outcomes = [a["outcome"] for a in attempts.json()["items"]]
        assert outcomes == ["lease_expired", "delivered"]
