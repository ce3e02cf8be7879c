"""A replica killed with deliveries in flight loses nothing: its claims come back when the
lease runs out, and the only cost is redelivery of what it held (at least once)."""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from app.settings.backends import backend_of
from app.worker.dispatcher import UNRECORDED_WINDOWS
from tests.conftest import ALL_STORES
from tests.e2e.processes import Service, Services
from tests.receiver import Receiver, Reply

pytestmark = pytest.mark.e2e

SCHEDULES = 300
SPREAD_SECONDS = 2.0  # one-shot triggers spread over this window after creation
REPLY_DELAY = 0.2  # slow replies keep deliveries in flight when the kill lands
KILL_AFTER = 100  # deliveries recorded before the kill
CONCURRENCY = 16  # the in-flight window
# The most a killed replica can leave sent but unsettled: in flight, or finished and
# waiting for a settle write. The loop holds starts back at that bound, however slow the
# store is.
UNSETTLED_BOUND = UNRECORDED_WINDOWS * CONCURRENCY
LEASE = 3.0
RECOVERY_TIMEOUT = 60.0
SETTLE_TIMEOUT = 30.0


def replica_settings(database_url: str) -> dict[str, str]:
    return {
        "DATABASE_URL": database_url,
        "CHRONOQ_LEASE": str(LEASE),
        "CHRONOQ_DISPATCH_TIMEOUT": "2",
        "CHRONOQ_CONCURRENCY": str(CONCURRENCY),
        "CHRONOQ_BATCH_SIZE": "100",
        "CHRONOQ_POLL_INTERVAL": "0.05",
        "CHRONOQ_MAX_ATTEMPTS": "5",
        "CHRONOQ_LOG_LEVEL": "INFO",
    }


def one_shot(receiver: Receiver, n: int) -> dict[str, Any]:
    return {
        "event_type": "e2e.crash_recovery",
        "payload": {"n": n},
        "target": {"type": "webhook", "url": receiver.url("/hook")},
        "trigger": {"type": "once", "delay_seconds": round(n * SPREAD_SECONDS / SCHEDULES, 3)},
    }


@dataclass
class Figures:
    """What the receiver saw, and when; printed whether the test passes or not."""

    dialect: str
    replicas: int
    receiver: Receiver
    began: float = field(default_factory=time.monotonic)
    created: int = 0
    killed_at: float | None = None  # wall clock, comparable with Received.at
    recorded_at_kill: int = 0
    elapsed: dict[str, float] = field(default_factory=dict)

    def mark(self, phase: str) -> None:
        self.elapsed[phase] = time.monotonic() - self.began

    def counts(self) -> Counter[str]:
        return Counter(r.occurrence_id for r in self.receiver.on("/hook"))

    def redeliveries(self) -> int:
        counts = self.counts()
        return sum(counts.values()) - len(counts)

    def attempts(self) -> dict[str, list[int]]:
        seen: dict[str, list[int]] = defaultdict(list)
        for r in sorted(self.receiver.on("/hook"), key=lambda r: r.at):
            seen[r.occurrence_id].append(int(r.headers["X-Attempt"]))
        return seen

    def render(self) -> str:
        counts = self.counts()
        duplicates = sorted(oid for oid, n in counts.items() if n > 1)
        lines = [
            f"[{self.dialect}, {self.replicas} replica(s)] created={self.created} "
            f"received={sum(counts.values())} unique={len(counts)} "
            f"duplicates={len(duplicates)} redeliveries={self.redeliveries()}"
        ]
        if self.killed_at is not None:
            killed_at = self.killed_at
            arrived = sum(1 for r in self.receiver.on("/hook") if r.at <= killed_at)
            lines.append(
                f"  arrived_before_kill={arrived} recorded_at_kill={self.recorded_at_kill} "
                f"in_flight_at_kill={arrived - self.recorded_at_kill}"
            )
        lines.append("  elapsed: " + " ".join(f"{k}={v:.1f}s" for k, v in self.elapsed.items()))
        attempts = self.attempts()
        lines.extend(f"  duplicate {oid}: X-Attempt {attempts[oid]}" for oid in duplicates)
        return "\n".join(lines)

    def check_redeliveries(self) -> None:
        extra = self.redeliveries()
        if extra > UNSETTLED_BOUND:
            worst = max(self.counts().values())
            pytest.fail(
                f"{extra} redeliveries exceed {UNSETTLED_BOUND}, {UNRECORDED_WINDOWS} in-flight "
                f"windows of {CONCURRENCY} (one occurrence arrived {worst} times): more than "
                "the killed replica can have left unsettled"
            )
        # Only what the killed replica had sent is sent again: every occurrence that arrived
        # twice arrived first before the kill (give or take what was on the wire then; its
        # lease keeps anything it held from being sent again for LEASE seconds).
        if self.killed_at is not None:
            sent_by = self.killed_at + LEASE / 2
            first: dict[str, float] = {}
            for r in self.receiver.on("/hook"):
                first[r.occurrence_id] = min(first.get(r.occurrence_id, r.at), r.at)
            late = [oid for oid, n in self.counts().items() if n > 1 and first[oid] > sent_by]
            if late:
                pytest.fail(f"{len(late)} occurrences first sent after the kill arrived twice")


async def wait_until(
    condition: Callable[[], bool | Awaitable[bool]],
    timeout: float,
    what: str,
    services: Services,
    figures: Figures,
) -> None:
    """Poll `condition` until true. Fail naming `what` when a replica that should be running
    died, when redeliveries already exceed the bound, or when the time is up."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        figures.check_redeliveries()
        if any(not s.alive for s in services.running):
            pytest.fail(f"a replica died while waiting for {what}\n{services.logs()}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g}s waiting for {what}\n{services.logs()}")
        await asyncio.sleep(0.1)


async def completed_schedules(client: httpx.AsyncClient, service: Service) -> list[dict[str, Any]]:
    """Every completed schedule, following the cursor through all pages."""
    items: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"status": "completed", "limit": 500}
        if cursor is not None:
            params["cursor"] = cursor
        response = await client.get(f"{service.base_url}/v1/schedules", params=params)
        assert response.status_code == 200, response.text
        page = response.json()
        items.extend(page["items"])
        cursor = page["next_cursor"]
        if cursor is None:
            return items


# Replicas sharing a server through a crash: each server leases and locks its own way.
@ALL_STORES
async def test_killed_replica_loses_no_occurrence(
    database_url: str, receiver: Receiver, services: Services
) -> None:
    backend = backend_of(database_url)
    assert backend is not None
    dialect = backend.name
    # SQLite has a single writer: one replica. The servers: a survivor keeps running too.
    replicas = 1 if dialect == "sqlite" else 2
    figures = Figures(dialect, replicas, receiver)
    try:
        await kill_and_recover(database_url, receiver, services, figures)
    finally:
        print("\n" + figures.render())  # noqa: T201


async def kill_and_recover(
    database_url: str, receiver: Receiver, services: Services, figures: Figures
) -> None:
    settings = replica_settings(database_url)
    receiver.always("/hook", Reply(delay=REPLY_DELAY))
    names = [f"{figures.dialect}-replica-{i}" for i in range(figures.replicas)]
    fleet = await asyncio.gather(*(services.start(name, settings) for name in names))
    victim = fleet[0]
    figures.mark("started")

    async with httpx.AsyncClient(trust_env=False, timeout=30.0) as client:
        response = await client.post(
            f"{victim.base_url}/v1/schedules/batch",
            json={"items": [one_shot(receiver, n) for n in range(SCHEDULES)]},
        )
        assert response.status_code == 201, response.text
        created = response.json()["items"]
        schedule_of = {item["next_occurrence_id"]: item["id"] for item in created}
        figures.created = len(created)
        assert len(schedule_of) == SCHEDULES, "every schedule has its own occurrence id"
        assert None not in schedule_of

        try:
            await receiver.wait_for(KILL_AFTER, path="/hook", timeout=30.0)
        except TimeoutError:
            pytest.fail(
                f"only {len(receiver.on('/hook'))} of {KILL_AFTER} deliveries arrived "
                f"before the kill\n{services.logs()}"
            )
        figures.killed_at = time.time()
        services.kill(victim)
        figures.mark("killed")
        at_kill = receiver.on("/hook")
        figures.recorded_at_kill = len(at_kill)
        unique_at_kill = len({r.occurrence_id for r in at_kill})
        assert unique_at_kill < SCHEDULES, (
            f"all {SCHEDULES} occurrences had arrived before the kill, so the test proves "
            "nothing: raise SCHEDULES or SPREAD_SECONDS"
        )

        api = await services.start(f"{figures.dialect}-replica-0-restarted", settings)
        figures.mark("restarted")

        def all_arrived() -> bool:
            return set(schedule_of) <= set(figures.counts())

        await wait_until(
            all_arrived, RECOVERY_TIMEOUT, "every occurrence to arrive", services, figures
        )
        figures.mark("all_arrived")

        expected = set(schedule_of.values())
        completed: dict[str, dict[str, Any]] = {}

        async def all_completed() -> bool:
            completed.clear()
            completed.update((s["id"], s) for s in await completed_schedules(client, api))
            return expected <= set(completed)

        await wait_until(
            all_completed, SETTLE_TIMEOUT, "every schedule to be completed", services, figures
        )
        figures.mark("all_completed")

        for schedule_id in (created[0]["id"], created[SCHEDULES // 2]["id"], created[-1]["id"]):
            response = await client.get(f"{api.base_url}/v1/schedules/{schedule_id}")
            assert response.status_code == 200, response.text
            snapshot = response.json()
            assert snapshot["status"] == "completed", snapshot
            assert snapshot["next_occurrence_id"] is None, snapshot

    # A graceful stop of every replica still running, all at once: nothing goes out after
    # this.
    running = list(services.running)
    codes = await asyncio.gather(*(services.stop(service, timeout=30.0) for service in running))
    for service, code in zip(running, codes, strict=True):
        # uvicorn re-raises the signal it caught once its shutdown is done.
        assert code in (0, -signal.SIGTERM), (
            f"{service.name} exited with {code}\n{service.log_tail()}"
        )
        assert "Application shutdown complete" in service.log_tail(), service.log_tail()
    figures.mark("stopped")

    counts = figures.counts()
    lost = set(schedule_of) - set(counts)
    assert not lost, f"{len(lost)} occurrences never arrived: {sorted(lost)}"
    unknown = set(counts) - set(schedule_of)
    assert not unknown, f"deliveries of occurrences nobody created: {sorted(unknown)}"
    figures.check_redeliveries()
    for oid, seen in figures.attempts().items():
        assert len(set(seen)) == len(seen), f"{oid} delivered twice under one attempt: {seen}"
    for occurrence_id, schedule_id in schedule_of.items():
        schedule = completed[schedule_id]
        assert schedule["fire_count"] == 1, schedule
        assert schedule["attempts"] >= counts[occurrence_id], (
            f"{occurrence_id} arrived {counts[occurrence_id]} times in fewer attempts: {schedule}"
        )
