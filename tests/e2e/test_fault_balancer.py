"""Three replicas behind nginx lose nothing when one is killed and another stopped mid-stream.

The balancer is deploy/nginx.conf itself, rendered for local ports (tests/nginx.py).
6,000 one-shot schedules due over 10 seconds go in through it in batches; while they fire, one
replica is SIGKILLed and another SIGTERMed, and both come back on their old ports, as a
restarted container does. Every occurrence must arrive; redeliveries stay within what the
killed replica can have held; the stopped replica exits by itself.

Creating through the balancer: a batch has no Idempotency-Key, and nginx does not resend a POST
that reached a replica (deploy/nginx.conf explains why). So every item carries a unique `name`
and labels naming its run and batch. A batch that fails in transit (transport error, 502, 503,
504) is sent again as it is: if the first attempt was never committed, the retry creates it; if
it was and only the answer was lost, the retry is refused with 409 (the batch is all or nothing,
and the names are taken) and the batch's schedules are read back by their labels. Either way
each schedule exists once.
"""

from __future__ import annotations

import asyncio
import signal
import statistics
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.domain.ids import occurrence_id
from tests.e2e.processes import Service, Services
from tests.nginx import Nginx, find_nginx, start_nginx
from tests.receiver import Received, Receiver, Reply

pytestmark = [pytest.mark.e2e, pytest.mark.postgres]

SCHEDULES = 6000
BATCH = 1000  # the largest batch the API takes
SPREAD_SECONDS = 10.0  # due instants spread evenly over this window
LEAD_SECONDS = 6.0  # from the start of creation to the first due instant (slow machines too)
FAULT_AFTER = 3.0  # from the first due instant to the kill and the SIGTERM
RESTART_AFTER = 1.5  # from the faults to the restarts
REPLY_DELAY = 0.2  # slow replies keep deliveries in flight when the faults land
DRAIN_TIMEOUT = 90.0
CREATE_TRIES = 4

LEASE = 5.0
DISPATCH_TIMEOUT = 3.0  # below the lease, so the killed replica's claims return quickly
STOP_GRACE = 5.0  # beyond the dispatch timeout, for the SIGTERMed replica to exit
REPLICA_SETTINGS = {
    "CHRONOQ_POLL_INTERVAL": "0.1",
    "CHRONOQ_LEASE": str(LEASE),
    "CHRONOQ_DISPATCH_TIMEOUT": str(DISPATCH_TIMEOUT),
    # The defaults, spelled out: they size the in-flight window below.
    "CHRONOQ_CONCURRENCY": "64",
    "CHRONOQ_BATCH_SIZE": "100",
}
# Claimed and not yet settled, at most: `concurrency` deliveries plus two claimed batches.
IN_FLIGHT_WINDOW = int(REPLICA_SETTINGS["CHRONOQ_CONCURRENCY"]) + 2 * int(
    REPLICA_SETTINGS["CHRONOQ_BATCH_SIZE"]
)


@pytest.fixture
def nginx_binary() -> str:
    return find_nginx()


@dataclass
class Figures:
    """What went in and what the receiver saw; printed whether the test passes or not."""

    receiver: Receiver
    expected: dict[str, datetime] = field(default_factory=dict)  # occurrence id -> fire_at
    first_due: float = 0.0  # wall clock
    create_seconds: float = 0.0
    create_retries: int = 0
    faults_at: float = 0.0  # wall clock
    stop_seconds: float | None = None
    stop_code: int | None = None
    restarted_after: float | None = None  # from the faults to both replicas serving again
    probes: Counter[str] = field(default_factory=Counter)
    nginx_retried: int = 0

    def counts(self) -> Counter[str]:
        return Counter(r.occurrence_id for r in self.receiver.on("/hook"))

    def duplicates(self) -> int:
        counts = self.counts()
        return sum(counts.values()) - len(counts)

    def first_arrivals(self) -> dict[str, Received]:
        first: dict[str, Received] = {}
        for r in self.receiver.on("/hook"):
            first.setdefault(r.occurrence_id, r)
        return first

    def lateness_by_second(self, first: Iterable[Received]) -> str:
        buckets: dict[int, list[float]] = defaultdict(list)
        for r in first:
            due = datetime.fromisoformat(r.headers["X-Scheduled-For"]).timestamp()
            buckets[int(due - self.first_due)].append(r.at - due)
        return " ".join(f"{statistics.median(buckets[k]):.2f}" for k in sorted(buckets))

    def redelivery_gaps(self) -> list[float]:
        seen: dict[str, list[float]] = defaultdict(list)
        for r in self.receiver.on("/hook"):
            seen[r.occurrence_id].append(r.at)
        return [at[1] - at[0] for at in seen.values() if len(at) > 1]

    def render(self) -> str:
        counts = self.counts()
        first = self.first_arrivals().values()
        lateness = sorted(
            r.at - datetime.fromisoformat(r.headers["X-Scheduled-For"]).timestamp() for r in first
        )
        line = (
            f"\nfault balancer: created={len(self.expected)} arrived={len(counts)} "
            f"deliveries={sum(counts.values())} duplicates={self.duplicates()} "
            f"(window {IN_FLIGHT_WINDOW}) create={self.create_seconds:.1f}s "
            f"create_retries={self.create_retries}"
        )
        if lateness:
            p99 = lateness[min(len(lateness) - 1, int(len(lateness) * 0.99))]
            last_due = self.first_due + SPREAD_SECONDS
            line += (
                f"\n  lateness p50={statistics.median(lateness):.3f}s p99={p99:.3f}s "
                f"max={lateness[-1]:.3f}s drain={max(r.at for r in first) - last_due:.1f}s "
                "after the last due instant"
                f"\n  lateness p50 by second of the stream: {self.lateness_by_second(first)}"
            )
        gaps = self.redelivery_gaps()
        if gaps:
            line += (
                f"\n  redelivered after the first arrival: p50={statistics.median(gaps):.2f}s "
                f"min={min(gaps):.2f}s max={max(gaps):.2f}s (lease {LEASE:g}s)"
            )
        if self.stop_seconds is not None:
            line += f"\n  sigterm: exit {self.stop_code} after {self.stop_seconds:.2f}s"
        if self.restarted_after is not None:
            line += f"; both replicas serving again {self.restarted_after:.1f}s after the faults"
        if self.probes:
            line += "\n  probes through nginx during the faults: " + " ".join(
                f"{k}={v}" for k, v in sorted(self.probes.items())
            )
            line += f", {self.nginx_retried} passed on to another replica by nginx"
        return line + "\n"


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)
async def test_replicas_behind_nginx_survive_kill_and_stop(
    database_url: str,
    receiver: Receiver,
    services: Services,
    nginx_binary: str,
    tmp_path: Path,
) -> None:
    figures = Figures(receiver)
    nginx: Nginx | None = None
    receiver.always("/hook", Reply(delay=REPLY_DELAY))
    try:
        settings = {"DATABASE_URL": database_url, **REPLICA_SETTINGS}
        fleet = await asyncio.gather(
            *(services.start(f"replica-{i}", settings) for i in range(1, 4))
        )
        # Their delivery processes started too: the stream's timing begins with the fleet.
        await asyncio.gather(*(s.wait_ready(60.0) for s in fleet))
        nginx = start_nginx(nginx_binary, [s.port for s in fleet], tmp_path / "nginx")
        await nginx.wait_serving(timeout=15.0)
        async with httpx.AsyncClient(
            base_url=nginx.base_url, trust_env=False, timeout=60.0
        ) as client:
            await create_stream(client, figures)
            await faults(client, services, fleet, settings, figures)
            await drain(client, services, figures, nginx)
        counts = figures.counts()
        assert set(counts) == set(figures.expected), "deliveries of occurrences nobody created"
        assert figures.duplicates() < IN_FLIGHT_WINDOW, (
            f"{figures.duplicates()} redeliveries: more than one replica's in-flight window "
            f"({IN_FLIGHT_WINDOW}) can hold"
        )
    finally:
        if nginx is not None:
            nginx.stop()
            figures.nginx_retried = nginx.retried()
        sys.stdout.write(figures.render())


async def create_stream(client: httpx.AsyncClient, figures: Figures) -> None:
    """SCHEDULES one-shots due evenly over SPREAD_SECONDS, LEAD_SECONDS from now, in batches
    sent concurrently through the balancer."""
    run = uuid.uuid4().hex[:8]
    began = time.time()
    figures.first_due = began + LEAD_SECONDS
    first_due = datetime.fromtimestamp(figures.first_due, UTC)
    fire_at = [
        first_due + timedelta(seconds=n * SPREAD_SECONDS / SCHEDULES) for n in range(SCHEDULES)
    ]
    url = figures.receiver.url("/hook")

    def item(n: int) -> dict[str, Any]:
        return {
            "name": f"fault-{run}-{n}",
            "event_type": "e2e.fault_balancer",
            "payload": {"n": n},
            "target": {"type": "webhook", "url": url},
            "trigger": {"type": "once", "at": fire_at[n].isoformat()},
            "labels": {"run": run, "batch": str(n // BATCH)},
        }

    batches = [
        [item(n) for n in range(start, min(start + BATCH, SCHEDULES))]
        for start in range(0, SCHEDULES, BATCH)
    ]
    gate = asyncio.Semaphore(3)

    async def one(index: int, items: list[dict[str, Any]]) -> dict[str, str]:
        async with gate:
            return await create_batch(client, figures, run, index, items)

    created = await asyncio.gather(*(one(i, items) for i, items in enumerate(batches)))
    ids = {name: schedule_id for batch in created for name, schedule_id in batch.items()}
    for n in range(SCHEDULES):
        schedule_id = uuid.UUID(ids[f"fault-{run}-{n}"])
        figures.expected[str(occurrence_id(schedule_id, fire_at[n]))] = fire_at[n]
    assert len(figures.expected) == SCHEDULES
    figures.create_seconds = time.time() - began


async def create_batch(
    client: httpx.AsyncClient, figures: Figures, run: str, index: int, items: list[dict[str, Any]]
) -> dict[str, str]:
    """One batch, sent again after a failure in transit; returns name -> schedule id."""
    failure = ""
    for attempt in range(1, CREATE_TRIES + 1):
        if attempt > 1:
            figures.create_retries += 1
            await asyncio.sleep(0.5)
        try:
            response = await client.post("/v1/schedules/batch", json={"items": items})
        except httpx.TransportError as exc:
            failure = f"{type(exc).__name__}: {exc}"
            continue
        if response.status_code == 201:
            created = response.json()["items"]
            for schedule in created:
                expected = occurrence_id(
                    uuid.UUID(schedule["id"]), datetime.fromisoformat(schedule["next_fire_at"])
                )
                assert schedule["next_occurrence_id"] == str(expected), schedule
            return {s["name"]: s["id"] for s in created}
        if response.status_code == 409 and attempt > 1:
            # An earlier attempt was committed and its answer lost.
            return await batch_ids(client, run, index, len(items))
        if response.status_code not in (502, 503, 504):
            pytest.fail(f"batch {index}: {response.status_code} {response.text[:500]}")
        failure = f"{response.status_code} {response.text[:200]}"
    pytest.fail(f"batch {index} failed {CREATE_TRIES} times, last: {failure}")


async def batch_ids(client: httpx.AsyncClient, run: str, index: int, size: int) -> dict[str, str]:
    ids: dict[str, str] = {}
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"label": [f"run:{run}", f"batch:{index}"], "limit": 500}
        if cursor is not None:
            params["cursor"] = cursor
        response = await client.get("/v1/schedules", params=params)
        assert response.status_code == 200, response.text
        page = response.json()
        ids.update((s["name"], s["id"]) for s in page["items"])
        cursor = page["next_cursor"]
        if cursor is None:
            assert len(ids) == size, f"batch {index}: {len(ids)} of {size} schedules found"
            return ids


async def sleep_until(wall_clock: float) -> None:
    await asyncio.sleep(max(0.0, wall_clock - time.time()))


async def restart_on_port(
    services: Services, name: str, settings: dict[str, str], port: int
) -> Service:
    """A replica on the port of the one it replaces, as a restarted container keeps its
    address: the rendered upstream list stays valid."""
    return await services.start(name, settings, port=port)


async def probe(client: httpx.AsyncClient, figures: Figures, done: asyncio.Event) -> None:
    """GET /healthz through nginx every 20 ms; nginx must route around the faults."""
    while not done.is_set():
        try:
            response = await client.get("/healthz", timeout=5.0)
            figures.probes[str(response.status_code)] += 1
        except httpx.TransportError as exc:
            figures.probes[type(exc).__name__] += 1
        await asyncio.sleep(0.02)


async def faults(
    client: httpx.AsyncClient,
    services: Services,
    fleet: Sequence[Service],
    settings: dict[str, str],
    figures: Figures,
) -> None:
    """SIGKILL replica-1 and SIGTERM replica-2 mid-stream; restart both on their ports."""
    killed, stopped = fleet[0], fleet[1]
    # The faults land FAULT_AFTER into the stream, or as soon as creation is done on a
    # machine slow to create it, while at least FAULT_AFTER of the stream is still to come.
    assert figures.first_due + SPREAD_SECONDS - FAULT_AFTER > time.time(), (
        f"creation took {figures.create_seconds:.1f}s: the stream would be over before the "
        "faults; raise LEAD_SECONDS"
    )
    await sleep_until(figures.first_due + FAULT_AFTER)
    done = asyncio.Event()
    probing = asyncio.create_task(probe(client, figures, done))
    try:
        figures.faults_at = time.time()
        arrived = len(figures.counts())
        assert 0 < arrived < SCHEDULES, f"{arrived} arrived at the faults: not mid-stream"
        services.kill(killed)
        began = time.monotonic()
        figures.stop_code = await services.stop(stopped, timeout=DISPATCH_TIMEOUT + STOP_GRACE)
        figures.stop_seconds = time.monotonic() - began
        # uvicorn re-raises the signal it caught once its shutdown is done.
        assert figures.stop_code in (0, -signal.SIGTERM), stopped.log_tail()
        assert "Application shutdown complete" in stopped.log_tail(), stopped.log_tail()
        await sleep_until(figures.faults_at + RESTART_AFTER)
        await asyncio.gather(
            restart_on_port(services, "replica-1-restarted", settings, killed.port),
            restart_on_port(services, "replica-2-restarted", settings, stopped.port),
        )
        figures.restarted_after = time.time() - figures.faults_at
    finally:
        done.set()
        await probing
    failed = sum(n for outcome, n in figures.probes.items() if outcome != "200")
    assert failed == 0, f"probes through nginx failed during the faults: {figures.probes}"


async def drain(
    client: httpx.AsyncClient, services: Services, figures: Figures, nginx: Nginx
) -> None:
    """Until every occurrence arrived and no schedule is left pending: a redelivery of what the
    killed replica held can only follow while its lease runs out."""
    deadline = time.monotonic() + DRAIN_TIMEOUT

    def check(what: str) -> None:
        if figures.duplicates() >= IN_FLIGHT_WINDOW:
            pytest.fail(f"{figures.duplicates()} redeliveries exceed {IN_FLIGHT_WINDOW}")
        if any(not s.alive for s in services.running):
            pytest.fail(f"a replica died while waiting for {what}\n{services.logs()}")
        if nginx.process.poll() is not None:
            pytest.fail(f"nginx died while waiting for {what}\n{nginx.errors()}")
        if time.monotonic() > deadline:
            missing = len(set(figures.expected) - set(figures.counts()))
            pytest.fail(
                f"timed out after {DRAIN_TIMEOUT:g}s waiting for {what} ({missing} of "
                f"{SCHEDULES} never arrived)\n{services.logs()}"
            )

    while not set(figures.expected) <= set(figures.counts()):
        check("every occurrence to arrive")
        await asyncio.sleep(0.1)
    while (pending := await count_pending(client)) > 0:
        check(f"the last {pending} schedules to complete")
        await asyncio.sleep(0.25)


async def count_pending(client: httpx.AsyncClient) -> int:
    response = await client.get("/v1/schedules", params={"status": "pending", "limit": 500})
    assert response.status_code == 200, response.text
    return len(response.json()["items"])
