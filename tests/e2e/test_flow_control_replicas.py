"""Two replica processes against one database share a flow key's limits: never more in
flight than its parallelism, never faster than its rate, whichever replica claims."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import empty_tables
from tests.e2e.processes import Service, Services, shared_services
from tests.receiver import Received, Receiver, Reply

pytestmark = pytest.mark.e2e

REPLY_DELAY = 0.3
TIMEOUT = 60.0


def settings(database_url: str) -> dict[str, str]:
    return {
        "DATABASE_URL": database_url,
        "CHRONOQ_CONCURRENCY": "16",
        "CHRONOQ_BATCH_SIZE": "50",
        "CHRONOQ_POLL_INTERVAL": "0.05",
        "CHRONOQ_LOG_LEVEL": "INFO",
    }


def keyed(receiver: Receiver, key: str, n: int) -> dict[str, Any]:
    return {
        "event_type": "e2e.flow",
        "payload": {"n": n},
        "target": {"type": "webhook", "url": receiver.url(f"/{key}")},
        "trigger": {"type": "immediate"},
        "flow_key": key,
    }


def most_at_once(requests: list[Received], lasting: float) -> int:
    """The most requests in flight at one instant, each taken to last `lasting` seconds
    from its arrival (a little less than the reply's delay: the next may arrive as soon as
    the one before is answered)."""
    return max(sum(1 for r in requests if r.at <= s.at < r.at + lasting) for s in requests)


@pytest.fixture(
    scope="module",
    params=[
        pytest.param("postgresql", marks=pytest.mark.postgres),
        pytest.param("mysql", marks=pytest.mark.mysql),
    ],
)
def fleet(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[Service]]:
    """Two replicas on each server, for both of the module's cases on it: each case has a
    flow key of its own and waits until its key has nothing in flight or waiting, so the
    other finds the replicas idle; their starts are paid once a server, not once a case."""
    url: str = request.getfixturevalue(
        {"postgresql": "postgres_url", "mysql": "mysql_url"}[request.param]
    )
    empty_tables(url)
    directory = tmp_path_factory.mktemp(f"flow-{request.param}")
    replicas = {f"flow-replica-{i}": settings(url) for i in range(2)}
    with shared_services(directory, replicas) as started:
        yield started


@pytest.fixture
def services(fleet: list[Service], tmp_path: Path) -> Services:
    """The fleet, for what a case says of it when something fails."""
    listed = Services(tmp_path)
    listed.started, listed.running = list(fleet), list(fleet)
    for replica in fleet:
        assert replica.alive, replica.log_tail()
    return listed


async def create(client: httpx.AsyncClient, service: Service, items: list[dict[str, Any]]) -> None:
    response = await client.post(f"{service.base_url}/v1/schedules/batch", json={"items": items})
    assert response.status_code == 201, response.text


async def wait_for(receiver: Receiver, path: str, count: int, services: Services) -> None:
    try:
        await receiver.wait_for(count, path=path, timeout=TIMEOUT)
    except TimeoutError:
        pytest.fail(f"{len(receiver.on(path))} of {count} arrived\n{services.logs()}")


async def test_two_replicas_never_hold_more_of_a_key_than_its_parallelism(
    fleet: list[Service], receiver: Receiver, services: Services
) -> None:
    receiver.always("/narrow", Reply(delay=REPLY_DELAY))
    receiver.always("/free", Reply(delay=REPLY_DELAY))
    first, second = fleet
    async with httpx.AsyncClient(trust_env=False, timeout=30.0) as client:
        put = await client.put(f"{first.base_url}/v1/flow-keys/narrow", json={"parallelism": 2})
        assert put.status_code == 201, put.text
        await create(client, second, [keyed(receiver, "narrow", n) for n in range(16)])
        await create(client, first, [keyed(receiver, "free", n) for n in range(16)])
        await wait_for(receiver, "/narrow", 16, services)

        narrow, free = receiver.on("/narrow"), receiver.on("/free")
        assert most_at_once(narrow, REPLY_DELAY - 0.05) == 2
        # The other key, unlimited, was never held back by this one.
        assert most_at_once(free, REPLY_DELAY - 0.05) > 2
        assert len({r.occurrence_id for r in narrow}) == 16
        # The last attempts settle: nothing is left in flight or waiting on the key.
        deadline = time.monotonic() + TIMEOUT
        while True:
            key = (await client.get(f"{second.base_url}/v1/flow-keys/narrow")).json()
            if (key["in_flight"], key["waiting"]) == (0, 0) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        assert (key["in_flight"], key["waiting"]) == (0, 0)


async def test_two_replicas_start_a_key_no_faster_than_its_rate(
    fleet: list[Service], receiver: Receiver, services: Services
) -> None:
    rate, count = 10, 25
    receiver.always("/paced", Reply())
    first, second = fleet
    async with httpx.AsyncClient(trust_env=False, timeout=30.0) as client:
        put = await client.put(
            f"{second.base_url}/v1/flow-keys/paced", json={"rate": rate, "burst": 1}
        )
        assert put.status_code == 201, put.text
        started = time.time()
        await create(client, first, [keyed(receiver, "paced", n) for n in range(count)])
        await wait_for(receiver, "/paced", count, services)

        arrivals = sorted(r.at for r in receiver.on("/paced"))
        # A burst of 1, then one each 1/rate s: the last no sooner than (count - 1) / rate.
        assert arrivals[-1] - started >= (count - 1) / rate - 0.05
        # Any one second holds at most rate + the burst.
        assert max(sum(1 for t in arrivals if s <= t < s + 1.0) for s in arrivals) <= rate + 1


async def test_two_replicas_send_one_probe_at_a_time_to_an_endpoint_whose_circuit_is_open(
    fleet: list[Service], receiver: Receiver, services: Services
) -> None:
    """An endpoint's circuit is fleet-wide: once it opens, whichever replica claims, one
    attempt at a time probes it, each after its cooldown; once it answers, the rest flow."""
    receiver.always("/flaky", Reply(503, delay=REPLY_DELAY))
    first, second = fleet
    async with httpx.AsyncClient(trust_env=False, timeout=30.0) as client:
        made = await client.post(
            f"{first.base_url}/v1/endpoints",
            json={
                "url": receiver.url("/flaky"),
                "circuit": {
                    "failure_threshold": 3,
                    "cooldown_seconds": 1,
                    "max_cooldown_seconds": 1,
                },
            },
        )
        assert made.status_code == 201, made.text
        endpoint = made.json()["id"]
        target = {"type": "endpoint", "endpoint_id": endpoint}
        items = [
            {
                "event_type": "e2e.circuit",
                "payload": {"n": n},
                "target": target,
                "trigger": {"type": "immediate"},
                "max_attempts": 100,
            }
            for n in range(20)
        ]
        await create(client, second, items)
        deadline = time.monotonic() + TIMEOUT
        while True:
            state = (await client.get(f"{second.base_url}/v1/endpoints/{endpoint}")).json()
            if state["state"] in ("open", "half_open") or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        assert state["state"] in ("open", "half_open"), state
        # Every attempt that started before the circuit opened is answered by then.
        await asyncio.sleep(REPLY_DELAY + 0.2)
        opened_at = time.time()
        await asyncio.sleep(4.0)
        probes = [r for r in receiver.on("/flaky") if r.at > opened_at]
        # A probe a cooldown (1 s, plus its reply), one at a time, from either replica.
        assert 1 <= len(probes) <= 5, len(probes)
        assert most_at_once(probes, REPLY_DELAY - 0.05) == 1

        receiver.always("/flaky", Reply(delay=0.01))
        deadline = time.monotonic() + TIMEOUT
        while True:
            state = (await client.get(f"{first.base_url}/v1/endpoints/{endpoint}")).json()
            done = (state["state"], state["waiting"], state["in_flight"]) == ("closed", 0, 0)
            listed = await client.get(
                f"{first.base_url}/v1/schedules?status=completed&event_type=e2e.circuit&limit=50"
            )
            if (done and len(listed.json()["items"]) == 20) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        assert state["state"] == "closed", state
        assert len(listed.json()["items"]) == 20, services.logs()
        kinds = [
            e["kind"]
            for e in (await client.get(f"{first.base_url}/v1/endpoints/{endpoint}/events")).json()[
                "items"
            ]
        ]
        assert (kinds[:2], kinds[-1]) == (["created", "opened"], "recovered"), kinds
