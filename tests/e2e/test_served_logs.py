"""What `chronoq serve` writes, as an operator's log collector reads it: in JSON mode every
line (uvicorn's, the delivery process's, the access log's) is one JSON object with no
terminal codes; in text mode a line about a schedule names it; an auto-pause is a warning
line; a database not migrated to this version is said at start, answered with 503 problems
naming `chronoq migrate`, never with a traceback, and served once migrated."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.processes import Service, Services, free_port, service_environment
from tests.integration.cli.commands import chronoq
from tests.receiver import Receiver, Reply
from tests.waiting import eventually

pytestmark = pytest.mark.e2e

KEY = "0123456789abcdef-e2e-logs"
HEADERS = {"Authorization": f"Bearer {KEY}"}
ESC = "\x1b"


def failing(receiver: Receiver, name: str, **extra: Any) -> dict[str, Any]:
    """A schedule firing now and then hourly whose target always answers 503 (a one-shot
    that dead-letters fails; a recurring one pauses)."""
    receiver.always("/down", Reply(503))
    return {
        "name": name,
        "event_type": "e2e.logs",
        "target": {"type": "webhook", "url": receiver.url("/down")},
        "trigger": {"type": "interval", "every_seconds": 3600},
        "max_attempts": 1,
        "pause_after_failures": 1,
        **extra,
    }


async def paused(client: httpx.AsyncClient, schedule_id: str) -> None:
    async def by_itself() -> bool:
        answer = await client.get(f"/v1/schedules/{schedule_id}", headers=HEADERS)
        return bool(answer.json()["pause_reason"] == "failures")

    await eventually(by_itself, within=20, what=f"schedule {schedule_id} auto-paused")


async def stopped_log(services: Services, service: Service) -> str:
    assert await services.stop(service, timeout=30) in (0, -15)
    return service.log_path.read_text(encoding="utf-8")


async def test_a_json_log_is_json_throughout_with_access_and_auto_pause_lines(
    empty_postgres: Callable[[], str], receiver: Receiver, services: Services
) -> None:
    service = await services.start(
        "json",
        {
            "DATABASE_URL": empty_postgres(),
            "CHRONOQ_LOG_FORMAT": "json",
            "CHRONOQ_API_KEYS": f"ops-bot:{KEY}",
            "CHRONOQ_POLL_INTERVAL": "0.2",
        },
    )
    async with httpx.AsyncClient(base_url=service.base_url, trust_env=False) as client:
        # Refused (not a parameter of the list), and logged without its value.
        queried = await client.get("/v1/schedules?token=not-for-the-log", headers=HEADERS)
        assert queried.status_code == 422
        created = await client.post(
            "/v1/schedules",
            json=failing(receiver, "json-report"),
            headers={**HEADERS, "X-Request-Id": "req-e2e-1"},
        )
        assert created.status_code == 201, created.text
        schedule_id = created.json()["id"]
        await paused(client, schedule_id)
        # A path with an escape sequence in it: a 404, logged without the escape.
        assert (await client.get("/v1/%1b[31mred", headers=HEADERS)).status_code == 404
    text = await stopped_log(services, service)

    assert ESC not in text
    assert KEY not in text
    assert "not-for-the-log" not in text
    entries = [json.loads(line) for line in text.splitlines() if line.strip()]
    loggers = {entry["logger"] for entry in entries}
    assert {
        "uvicorn.error",
        "app.access",
        "app.process.delivery",
        "app.worker.dispatcher",
    } <= loggers
    assert all("color_message" not in entry for entry in entries)

    (access,) = [
        e for e in entries if e["logger"] == "app.access" and e.get("request_id") == "req-e2e-1"
    ]
    assert {k: access[k] for k in ("method", "path", "status", "client", "api_key")} == {
        "method": "POST",
        "path": "/v1/schedules",
        "status": 201,
        "client": "127.0.0.1",
        "api_key": "ops-bot",
    }
    assert access["duration_ms"] > 0
    red = [e for e in entries if e["logger"] == "app.access" and e["status"] == 404]
    assert [e["path"] for e in red] == ["/v1/%1b[31mred"]
    refused = [e for e in entries if e["logger"] == "app.access" and e["status"] == 422]
    assert [e["path"] for e in refused] == ["/v1/schedules"]

    (pause,) = [e for e in entries if "paused itself" in e["message"]]
    assert pause["level"] == "WARNING"
    assert (pause["schedule_id"], pause["schedule_name"]) == (schedule_id, "json-report")
    assert (pause["consecutive_failures"], pause["pause_after_failures"]) == (1, 1)


async def test_the_app_served_by_uvicorn_itself_logs_json_throughout(tmp_path: Path) -> None:
    port = free_port()
    log_path = tmp_path / "uvicorn.log"
    uvicorn = Path(sys.executable).with_name("uvicorn")
    settings = {
        "DATABASE_URL": f"sqlite:///{tmp_path / 'chronoq.db'}",
        "CHRONOQ_LOG_FORMAT": "json",
    }
    with log_path.open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            str(uvicorn),
            "app.main:app",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            env=service_environment(settings),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
        )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", trust_env=False) as c:

            async def answers() -> bool:
                assert process.returncode is None, log_path.read_text(encoding="utf-8")
                try:
                    return (await c.get("/v1/schedules")).status_code == 200
                except httpx.TransportError:
                    return False

            await eventually(answers, within=30, what="uvicorn app.main:app serving")
        process.send_signal(signal.SIGTERM)
        # uvicorn ends as the SIGTERM it handled would have ended it.
        assert await asyncio.wait_for(process.wait(), 30) in (0, -signal.SIGTERM)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    text = log_path.read_text(encoding="utf-8")

    assert ESC not in text
    entries = [json.loads(line) for line in text.splitlines() if line.strip()]
    messages = [e["message"] for e in entries if e["logger"] == "uvicorn.error"]
    assert "Application startup complete." in messages
    assert f"Uvicorn running on http://127.0.0.1:{port} (Press CTRL+C to quit)" in messages
    assert [e["path"] for e in entries if e["logger"] == "app.access"] == ["/v1/schedules"]
    assert not any(e["logger"] == "uvicorn.access" for e in entries)


async def test_a_text_log_names_the_schedule_on_its_lines(
    tmp_path: Path, receiver: Receiver, services: Services
) -> None:
    service = await services.start(
        "text",
        {
            "DATABASE_URL": f"sqlite:///{tmp_path / 'chronoq.db'}",
            "CHRONOQ_API_KEYS": f"ops-bot:{KEY}",
            "CHRONOQ_POLL_INTERVAL": "0.2",
            "CHRONOQ_RETRY_BASE_DELAY": "0.1",
            "CHRONOQ_RETRY_MAX_DELAY": "0.2",
        },
    )
    async with httpx.AsyncClient(base_url=service.base_url, trust_env=False) as client:
        created = await client.post(
            "/v1/schedules", json=failing(receiver, "text-report", max_attempts=2), headers=HEADERS
        )
        assert created.status_code == 201, created.text
        schedule_id = created.json()["id"]
        await paused(client, schedule_id)
    lines = (await stopped_log(services, service)).splitlines()

    about = [line for line in lines if f"schedule_id={schedule_id}" in line]
    assert any(
        " INFO app.worker.dispatcher: " in line and "outcome=retry" in line for line in about
    )
    assert any(" WARNING " in line and "outcome=dead_lettered" in line for line in about)
    (pause,) = [line for line in about if "paused itself" in line]
    assert " WARNING app.worker.dispatcher: " in pause
    assert pause.endswith(
        f"schedule_id={schedule_id} schedule_name=text-report consecutive_failures=1 "
        "pause_after_failures=1"
    )
    assert any(
        "app.access: request method=POST path=/v1/schedules status=201 " in line
        and line.endswith("api_key=ops-bot")
        for line in lines
    )


async def test_an_unmigrated_database_is_said_at_start_refused_with_503_and_served_once_migrated(
    empty_postgres: Callable[[], str], receiver: Receiver, services: Services
) -> None:
    url = empty_postgres()
    service = await services.start(
        "unmigrated",
        {"DATABASE_URL": url, "CHRONOQ_AUTO_MIGRATE": "false", "CHRONOQ_POLL_INTERVAL": "0.2"},
    )
    spec = {
        "event_type": "e2e.logs",
        "target": {"type": "webhook", "url": receiver.url("/hook")},
        "trigger": {"type": "immediate"},
    }
    async with httpx.AsyncClient(base_url=service.base_url, trust_env=False) as client:
        refused = [await client.get("/v1/schedules"), await client.post("/v1/schedules", json=spec)]
        assert (await client.get("/readyz")).status_code == 503

        migrated = await asyncio.to_thread(chronoq, "migrate", DATABASE_URL=url)
        assert migrated.returncode == 0, migrated.stderr

        listed = await client.get("/v1/schedules")
        created = await client.post("/v1/schedules", json=spec)
        await receiver.wait_for(1, "/hook", timeout=20)
        await service.wait_ready(20)
    text = await stopped_log(services, service)

    for answer in refused:
        assert answer.status_code == 503
        assert answer.headers["retry-after"] == "2"
        assert answer.json()["type"] == "urn:chronoq:problem:schema-not-migrated"
        assert "`chronoq migrate`" in answer.json()["detail"]
    assert (listed.status_code, created.status_code) == (200, 201)

    assert "Traceback" not in text
    (start,) = [line for line in text.splitlines() if "schema revision" in line]
    assert " WARNING " in start
    assert "at schema revision none" in start
    assert "run `chronoq migrate`" in start
    refusals = [line for line in text.splitlines() if " WARNING app.api.problems: " in line]
    assert len(refusals) == 2
    assert all("run `chronoq migrate`" in line for line in refusals)
