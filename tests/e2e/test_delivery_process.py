"""`chronoq serve` on PostgreSQL runs the delivery loop in a process of its own beside the API's:
it delivers what the API takes, the API's /readyz and /metrics report it, one that dies is
started again (losing nothing), SIGTERM drains it, and it does not outlive its parent (each
case goes on through several of these, since a replica's start is most of its cost).
Elsewhere (SQLite, or `CHRONOQ_DELIVERY_PROCESS=shared`) the loop stays on the API's event loop.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.processes import Service, Services
from tests.receiver import Receiver, Reply
from tests.waiting import eventually

pytestmark = pytest.mark.e2e

DELIVERY = b"app.process.delivery"


def delivery_processes(parent: int) -> list[int]:
    """The live delivery processes `parent` started."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            command = (entry / "cmdline").read_bytes()
        except (OSError, IndexError):
            continue
        if int(stat[1]) == parent and stat[0] != "Z" and DELIVERY in command:
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return stat[0] != "Z"


def settings(database_url: str, **extra: str) -> dict[str, str]:
    return {
        "DATABASE_URL": database_url,
        "CHRONOQ_POLL_INTERVAL": "0.5",
        "CHRONOQ_ACTIVITY_INTERVAL": "0.5",
        **extra,
    }


def immediate(receiver: Receiver, n: int) -> dict[str, Any]:
    return {
        "event_type": "e2e.delivery_process",
        "payload": {"n": n},
        "target": {"type": "webhook", "url": receiver.url("/hook")},
        "trigger": {"type": "immediate"},
    }


async def attempted_by(client: httpx.AsyncClient, occurrence_id: str) -> list[str]:
    """The pids of the processes that made the occurrence's attempts, once it has one (the
    attempt is recorded with the settle, just after the receiver answers)."""
    attempts: list[dict[str, Any]] = []

    async def recorded() -> bool:
        nonlocal attempts
        answer = await client.get(f"/v1/occurrences/{occurrence_id}/attempts")
        attempts = answer.json()["items"]
        return bool(attempts)

    await eventually(recorded, within=10, what=f"an attempt of {occurrence_id} recorded")
    return [a["replica"].split(":")[1] for a in attempts]


async def ready(client: httpx.AsyncClient) -> bool:
    return (await client.get("/readyz")).status_code == 200


async def one_delivery_process(service: Service) -> int:
    async def started() -> bool:
        return len(delivery_processes(service.pid)) == 1

    await eventually(started, within=30, what="one delivery process")
    return delivery_processes(service.pid)[0]


@pytest.mark.postgres
@pytest.mark.rabbitmq
async def test_the_loop_runs_in_a_process_of_its_own_that_the_api_reports_and_outlives_nothing(
    postgres_url: str, amqp_url: str, receiver: Receiver, services: Services, tmp_path: Path
) -> None:
    # Served from a folder that holds a package of its own named `app`, as a team's project
    # does: the delivery process runs Chronoq's code all the same, not what is beside it.
    project = tmp_path / "project"
    (project / "app").mkdir(parents=True)
    (project / "app" / "__init__.py").write_text('raise ImportError("the project\'s own app")\n')
    # With a broker: the delivery process holds the connection, and readiness reports it.
    service = await services.start(
        "replica", settings(postgres_url, AMQP_URL=amqp_url), cwd=project
    )
    delivering = await one_delivery_process(service)
    async with httpx.AsyncClient(base_url=service.base_url, trust_env=False) as client:
        await eventually(lambda: ready(client), within=30, what="/readyz 200")
        body = (await client.get("/readyz")).json()
        assert body["checks"] == {"database": "ok", "broker": "ok", "worker": "ok"}

        items = [immediate(receiver, n) for n in range(20)]
        answer = await client.post("/v1/schedules/batch", json={"items": items})
        assert answer.status_code == 201, answer.text
        await receiver.wait_for(20, path="/hook", timeout=30)
        arrivals = Counter(r.occurrence_id for r in receiver.on("/hook"))
        assert len(arrivals) == 20
        assert set(arrivals.values()) == {1}

        # The delivery process made every attempt: the attempt log names its pid.
        assert await attempted_by(client, next(iter(arrivals))) == [str(delivering)]

        # /metrics: the API process's series and the delivery process's, each family once.
        async def counted() -> bool:
            text = (await client.get("/metrics")).text
            return (
                'chronoq_deliveries_total{outcome="delivered",process="delivery",'
                'target_type="webhook"} 20.0' in text
            )

        await eventually(counted, within=10, what="20 deliveries in /metrics")
        text = (await client.get("/metrics")).text
        types = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")]
        assert len(types) == len(set(types)), "a metric family is written twice"
        families = {f.name: f for f in text_string_to_metric_families(text)}
        requests = families["chronoq_http_request_duration_seconds"].samples
        assert requests
        assert all("process" not in s.labels for s in requests)
        memory = families["process_resident_memory_bytes"].samples
        assert sorted(s.labels.get("process", "api") for s in memory) == ["api", "delivery"]

        # The console's header reads the attempt log the delivery process wrote, as the
        # charts do (rolled up every CHRONOQ_ACTIVITY_INTERVAL), not the API process's
        # zeros; what is in flight is the replica's, delivery process included.
        figures: dict[str, str] = {}

        async def shown() -> bool:
            nonlocal figures
            live = (await client.get("/ui/live")).text
            figures = dict(re.findall(r"<dt>([^<]+)</dt><dd>([^<]+)</dd>", live))
            return figures.get("lag p99", "-") != "-"

        await eventually(shown, within=30, what="the header's figures rolled up")
        assert figures["delivered/s"] not in ("0", "-"), figures
        # The fleet's: these 20, and what other cases delivered through the same database.
        totals = (await client.get("/v1/activity")).json()["totals"]
        assert totals["delivered"] >= 20, totals

    # A parent that dies outright (only it, not its group): the delivery process stops too.
    os.kill(service.pid, signal.SIGKILL)
    service.process.wait(timeout=10)
    try:
        await eventually(lambda: not alive(delivering), within=30, what="the orphan to stop")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(delivering, signal.SIGKILL)


@pytest.mark.postgres
async def test_a_delivery_process_that_dies_is_started_again_and_sigterm_drains_it(
    postgres_url: str, receiver: Receiver, services: Services
) -> None:
    service = await services.start("replica", settings(postgres_url))
    first = await one_delivery_process(service)
    async with httpx.AsyncClient(base_url=service.base_url, trust_env=False) as client:
        await eventually(lambda: ready(client), within=30, what="/readyz 200")
        os.kill(first, signal.SIGKILL)

        async def reported() -> bool:
            answer = await client.get("/readyz")
            return (
                answer.status_code == 503
                and answer.json()["checks"]["worker"] == "delivery process not answering"
            )

        await eventually(reported, within=10, what="/readyz naming the missing process")
        # Taken while no process delivers: the next one delivers it.
        answer = await client.post("/v1/schedules", json=immediate(receiver, 1))
        assert answer.status_code == 201, answer.text

        async def replaced() -> bool:
            now = delivery_processes(service.pid)
            return len(now) == 1 and now[0] != first

        await eventually(replaced, within=30, what="a new delivery process")
        await eventually(lambda: ready(client), within=30, what="/readyz 200 again")
        await receiver.wait_for(1, path="/hook", timeout=30)
        assert f"delivery process 1 (pid {first}) exited with -9" in service.log_tail(200)

        # SIGTERM with a delivery in flight: the delivery process finishes and settles it.
        receiver.always("/slow", Reply(delay=1.5))
        slow = {
            **immediate(receiver, 2),
            "target": {"type": "webhook", "url": receiver.url("/slow")},
        }
        answer = await client.post("/v1/schedules", json=slow)
        assert answer.status_code == 201, answer.text
        schedule_id = answer.json()["id"]
    await receiver.wait_for(1, path="/slow", timeout=30)  # in flight: the reply takes 1.5 s
    delivering = delivery_processes(service.pid)[0]
    code = await services.stop(service, timeout=30)
    assert code == -signal.SIGTERM, service.log_tail()
    assert not alive(delivering), "the delivery process outlived its parent"
    connection = await asyncpg.connect(postgres_url)
    try:
        status = await connection.fetchval(
            "SELECT status FROM occurrences WHERE schedule_id = $1", schedule_id
        )
    finally:
        await connection.close()
    assert status == "delivered", service.log_tail()
    assert len(receiver.on("/slow")) == 1


@pytest.mark.parametrize("store", ["sqlite", "shared"])
async def test_sqlite_and_shared_keep_the_loop_on_the_api_event_loop(
    store: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    receiver: Receiver,
    services: Services,
) -> None:
    if store == "sqlite":
        configured = settings(f"sqlite:///{tmp_path / 'one.db'}")
    else:
        url: str = request.getfixturevalue("postgres_url")
        configured = settings(url, CHRONOQ_DELIVERY_PROCESS="shared")
    service = await services.start("replica", configured)
    async with httpx.AsyncClient(base_url=service.base_url, trust_env=False) as client:
        await eventually(lambda: ready(client), within=30, what="/readyz 200")
        answer = await client.post("/v1/schedules", json=immediate(receiver, 1))
        assert answer.status_code == 201, answer.text
        await receiver.wait_for(1, path="/hook", timeout=30)
        replicas = await attempted_by(client, receiver.on("/hook")[0].occurrence_id)
    assert delivery_processes(service.pid) == []
    assert replicas == [str(service.pid)]
