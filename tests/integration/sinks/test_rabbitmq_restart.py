"""A broker that blinks mid-stream: nothing is lost and the service recovers by itself."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import aio_pika
import pytest

from app.worker.dispatcher import Dispatcher
from tests.integration.conftest import Harness

# It stops the broker that every other RabbitMQ case uses: `make test` runs it on its own.
pytestmark = [pytest.mark.rabbitmq, pytest.mark.e2e, pytest.mark.alone]

STREAM = 300
OUTAGE_SECONDS = 3.0


def rabbitmqctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", "-q", *args], check=True, timeout=120, capture_output=True)


async def _drain(url: str, queue_name: str, want: set[str], timeout: float) -> list[str]:
    """Consume until every wanted message id arrived (reconnecting as needed), or the
    deadline passes: the caller compares what arrived with what it wanted."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while not want <= set(seen) and time.monotonic() < deadline:
        try:
            connection = await aio_pika.connect(url, timeout=5)
        except Exception:
            await asyncio.sleep(0.5)
            continue
        try:
            channel = await connection.channel()
            queue = await channel.declare_queue(queue_name, durable=True, passive=True)
            while (message := await queue.get(no_ack=True, fail=False)) is not None:
                seen.append(str(message.message_id))
        finally:
            await connection.close()
        await asyncio.sleep(0.2)
    return seen


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
async def test_every_occurrence_arrives_across_a_broker_restart(
    make_harness: Callable[..., Any],
    amqp_url: str,
) -> None:
    queue_name = f"chronoq-test-restart-{uuid.uuid4().hex[:10]}"
    connection = await aio_pika.connect(amqp_url)
    channel = await connection.channel()
    await channel.declare_queue(queue_name, durable=True)
    await connection.close()
    # The retry budget covers the outage however slowly the broker comes back: each
    # failed publish is a counted attempt.
    overrides: dict[str, Any] = {
        "amqp_url": amqp_url,
        "max_attempts": 1000,
        "retry_base_delay": 0.1,
        "retry_max_delay": 0.5,
    }
    try:
        async with make_harness(**overrides) as harness:
            dispatcher = Dispatcher(harness.database, harness.sinks, harness.settings)
            async with dispatcher.started():
                schedule_ids, ids = await _stream(harness, queue_name)
                await asyncio.sleep(1.0)  # part of the stream is out before the outage
                rabbitmqctl("stop_app")
                try:
                    await asyncio.sleep(OUTAGE_SECONDS)
                finally:
                    rabbitmqctl("start_app")
                    rabbitmqctl("await_startup")
                seen = await _drain(amqp_url, queue_name, set(ids), timeout=90)
                missing = set(ids) - set(seen)
                assert not missing, (
                    await _states(harness, schedule_ids, missing) + "\n" + _loop_state(dispatcher)
                )
            assert harness.sinks.broker is not None
            assert harness.sinks.broker.connected
            ready = await harness.client.get("/readyz")
            assert ready.status_code == 200, ready.text
        duplicates = len(seen) - len(set(seen))
        sys.stdout.write(f"\nstream={len(ids)} received={len(seen)} duplicates={duplicates}\n")
        assert set(seen) == set(ids)
    finally:
        rabbitmqctl("await_startup")
        connection = await aio_pika.connect(amqp_url)
        channel = await connection.channel()
        await channel.queue_delete(queue_name)
        await connection.close()


async def _stream(harness: Harness, queue_name: str) -> tuple[list[str], list[str]]:
    """STREAM one-shot occurrences due over the next few seconds."""
    items = [
        {
            "event_type": "restart.test",
            "payload": {"n": n},
            "target": {"type": "rabbitmq", "exchange": "", "routing_key": queue_name},
            "trigger": {"type": "once", "delay_seconds": round(n * 4.0 / STREAM, 3)},
        }
        for n in range(STREAM)
    ]
    response = await harness.client.post("/v1/schedules/batch", json={"items": items})
    assert response.status_code == 201, response.text
    created = response.json()["items"]
    return [item["id"] for item in created], [item["next_occurrence_id"] for item in created]


def _loop_state(dispatcher: Dispatcher) -> str:
    task = dispatcher._task
    died = task.exception() if task is not None and task.done() else None
    return (
        f"loop: running={dispatcher.running} died={died!r} cycles={dispatcher.cycles} "
        f"errors={dispatcher.errors} in_flight={dispatcher.in_flight} "
        f"waiting={dispatcher.waiting} health={dispatcher.health()} "
        f"claims={len(dispatcher._claims)} claiming={dispatcher._claiming} "
        f"wake_in={dispatcher._alarm.remaining():.2f}s"
    )


async def _states(harness: Harness, schedule_ids: list[str], missing: set[str]) -> str:
    """Why occurrences did not arrive: their status, attempts and last error, tallied."""
    tally: Counter[str] = Counter()
    for schedule_id in schedule_ids:
        for occurrence in await harness.occurrences(schedule_id):
            if occurrence["occurrence_id"] in missing:
                error = (occurrence.get("last_error") or "")[:80]
                tally[f"{occurrence['status']} attempts={occurrence['attempts']} {error}"] += 1
    lines = [f"{len(missing)} occurrences never arrived:"]
    lines += [f"  {count} x {state}" for state, count in tally.most_common(10)]
    return "\n".join(lines)
