"""Hostile clients against `chronoq serve` itself (DESIGN section 8): sockets that send nothing
or trickle, beyond the connection cap, cannot take the replica's descriptors, nor keep it from
answering its probes and delivering.

The cases run replicas on SQLite with API keys set, as the probe that found these did, and
talk to them over real sockets; the cases of the default settings share one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.processes import (
    CHRONOQ,
    Service,
    Services,
    free_port,
    service_environment,
    shared_services,
)
from tests.receiver import Receiver

pytestmark = pytest.mark.e2e

KEY = "hostile-0123456789abcdef"
AUTHORIZATION = {"Authorization": f"Bearer {KEY}"}
CAP = 20
HEAD_TIMEOUT = 1.0
BODY_TIMEOUT = 2.0


def settings(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        "DATABASE_URL": f"sqlite:///{tmp_path / 'chronoq.db'}",
        "CHRONOQ_API_KEYS": f"probe:{KEY}",
        "CHRONOQ_MAX_CONNECTIONS": str(CAP),
        "CHRONOQ_REQUEST_HEAD_TIMEOUT": str(HEAD_TIMEOUT),
        "CHRONOQ_REQUEST_BODY_TIMEOUT": str(BODY_TIMEOUT),
        "CHRONOQ_POLL_INTERVAL": "0.2",
        **extra,
    }


@pytest.fixture(scope="module")
def module_replica(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """The replica of the cases with the default settings: each opens a connection or two,
    which the replica ends within its timeouts, and writes nothing; so they share one."""
    directory = tmp_path_factory.mktemp("replica")
    with shared_services(directory, {"replica": settings(directory)}) as [service]:
        yield service


@pytest.fixture
def service(module_replica: Service) -> Service:
    """The module's replica, still serving when a case begins."""
    assert module_replica.alive, module_replica.log_tail()
    return module_replica


Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


@contextlib.asynccontextmanager
async def connections(service: Service, count: int) -> AsyncIterator[list[Connection]]:
    """`count` connections to the service that send nothing, closed on the way out."""
    opened: list[Connection] = []
    try:
        for _ in range(count):
            opened.append(await asyncio.open_connection("127.0.0.1", service.port))
        yield opened
    finally:
        for _, writer in opened:
            writer.close()


async def closed_by_server(reader: asyncio.StreamReader, timeout: float) -> bool:
    """Whether the server ends the connection within `timeout` seconds (having sent nothing)."""
    try:
        data = await asyncio.wait_for(reader.read(1), timeout)
    except TimeoutError:
        return False
    except ConnectionError:
        return True
    assert data == b"", f"the server answered {data!r}"
    return True


async def seconds_until_closed(reader: asyncio.StreamReader, limit: float = 10.0) -> float:
    started = time.monotonic()
    assert await closed_by_server(reader, limit), f"still open after {limit:g} s"
    return time.monotonic() - started


def descriptors(service: Service) -> int:
    return len(os.listdir(f"/proc/{service.pid}/fd"))


async def healthz(service: Service) -> int:
    async with httpx.AsyncClient(base_url=service.base_url, trust_env=False) as client:
        return (await client.get("/healthz", timeout=5)).status_code


async def test_idle_sockets_beyond_the_cap_are_closed_and_healthz_still_answers(
    services: Services, tmp_path: Path
) -> None:
    # A head timeout far off: what closes them here is the cap.
    service = await services.start("replica", settings(tmp_path, CHRONOQ_REQUEST_HEAD_TIMEOUT="60"))
    before = descriptors(service)

    async with connections(service, 3 * CAP) as idle:
        await asyncio.sleep(0.5)
        assert await healthz(service) == 200
        closed = await asyncio.gather(*(closed_by_server(reader, 1.0) for reader, _ in idle))

        assert sum(closed) >= 2 * CAP, f"{sum(closed)} of {3 * CAP} closed"
        assert closed[:CAP] == [True] * CAP  # the longest waiting made room first
        assert descriptors(service) <= before + CAP + 2


async def test_a_silent_connection_is_closed_within_the_head_timeout(service: Service) -> None:

    async with connections(service, 1) as [(reader, _)]:
        waited = await seconds_until_closed(reader)

    assert HEAD_TIMEOUT * 0.8 <= waited <= HEAD_TIMEOUT + 3


async def _trickle(writer: asyncio.StreamWriter, pieces: list[bytes], every: float) -> None:
    with contextlib.suppress(ConnectionError):
        for piece in pieces:
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(every)


async def test_a_header_trickle_is_closed_within_the_head_timeout(service: Service) -> None:

    async with connections(service, 1) as [(reader, writer)]:
        head = [b"GET /healthz HTTP/1.1\r\n", b"Host: 127.0.0.1\r\n"]
        sending = asyncio.create_task(_trickle(writer, head + [b"X-Slow: 1\r\n"] * 100, 0.2))
        waited = await seconds_until_closed(reader)
        sending.cancel()

    assert waited <= HEAD_TIMEOUT + 3


async def _response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    status_line = await reader.readline()
    headers: dict[str, str] = {}
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return int(status_line.split()[1]), headers, body


async def test_a_keep_alive_connection_trickling_its_next_head_is_closed(service: Service) -> None:

    async with connections(service, 1) as [(reader, writer)]:
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        status, _, _ = await _response(reader)
        assert status == 200
        # The keep-alive timeout (5 s) is cancelled by every byte; the head timeout is not.
        sending = asyncio.create_task(
            _trickle(writer, [b"GET /healthz HTTP/1.1\r\n"] + [b"X-Slow: 1\r\n"] * 100, 0.2)
        )
        waited = await seconds_until_closed(reader)
        sending.cancel()

    assert waited <= HEAD_TIMEOUT + 3


async def test_a_trickled_body_is_cut_at_its_total_time_with_a_408(service: Service) -> None:

    async with connections(service, 1) as [(reader, writer)]:
        writer.write(
            b"POST /v1/schedules HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Authorization: Bearer " + KEY.encode() + b"\r\n"
            b"Content-Type: application/json\r\nContent-Length: 10000\r\n\r\n"
        )
        started = time.monotonic()
        # A byte every 0.2 s: never idle for long, done in about half an hour.
        sending = asyncio.create_task(_trickle(writer, [b" "] * 10000, 0.2))
        status, headers, body = await asyncio.wait_for(_response(reader), BODY_TIMEOUT + 5)
        answered = time.monotonic() - started
        closed = await closed_by_server(reader, 2)
        sending.cancel()

    assert status == 408, body
    assert headers["content-type"] == "application/problem+json"
    assert b"CHRONOQ_REQUEST_BODY_TIMEOUT" in body
    assert BODY_TIMEOUT * 0.8 <= answered <= BODY_TIMEOUT + 3
    assert closed, "the connection stayed open after the 408"
    async with httpx.AsyncClient(base_url=service.base_url, trust_env=False) as client:
        listed = await client.get("/v1/schedules", headers=AUTHORIZATION)
    assert listed.json()["items"] == []


async def test_a_delivery_succeeds_while_idle_sockets_hold_the_cap(
    services: Services, tmp_path: Path, receiver: Receiver
) -> None:
    # The process may open 400 files: more idle sockets than that would leave none for the
    # delivery, as they did before the cap (`connection failed: [Errno 24] Too many open
    # files`).
    service = await services.start(
        "replica",
        settings(tmp_path, CHRONOQ_REQUEST_HEAD_TIMEOUT="60", CHRONOQ_CONCURRENCY="4"),
        ulimit="-n 400",
    )
    async with httpx.AsyncClient(base_url=service.base_url, trust_env=False) as client:
        created = await client.post(
            "/v1/schedules",
            headers=AUTHORIZATION,
            json={
                "event_type": "hostile.delivery",
                "payload": {"n": 1},
                "target": {"type": "webhook", "url": receiver.url("/hook")},
                "trigger": {"type": "once", "delay_seconds": 2},
                "max_attempts": 1,
            },
        )
        assert created.status_code == 201, created.text

    async with connections(service, 600):
        arrived = await receiver.wait_for(1, path="/hook", timeout=20)
        assert await healthz(service) == 200

    assert arrived[0].headers["X-Event-Type"] == "hostile.delivery"


def _serve_command(tmp_path: Path, ulimit: str) -> tuple[list[str], dict[str, str]]:
    """`chronoq serve` under `ulimit <ulimit>` (the shell sets it, then becomes the service),
    and its environment."""
    serve = [str(CHRONOQ), "serve", "--host", "127.0.0.1", "--port", str(free_port())]
    command = ["/bin/sh", "-c", f'ulimit {ulimit} && exec "$@"', "sh", *serve]
    environment = service_environment(
        {"DATABASE_URL": f"sqlite:///{tmp_path / 'chronoq.db'}", "CHRONOQ_API_KEYS": f"probe:{KEY}"}
    )
    return command, environment


def test_serve_refuses_a_cap_that_leaves_too_few_descriptors(tmp_path: Path) -> None:
    # 1024 files in all, the hard limit too: a cap of 1024 would leave none.
    command, environment = _serve_command(tmp_path, "-n 1024")
    environment["CHRONOQ_MAX_CONNECTIONS"] = "1024"

    finished = subprocess.run(
        command, env=environment, capture_output=True, text=True, timeout=60, check=False
    )

    assert finished.returncode == 2, finished.stderr
    assert finished.stderr.startswith(
        "chronoq: CHRONOQ_MAX_CONNECTIONS=1024 leaves too few file descriptors"
    )
    assert "lower CHRONOQ_MAX_CONNECTIONS to at most 672" in finished.stderr
    assert "Uvicorn running" not in finished.stderr
    assert not (tmp_path / "chronoq.db").exists()


def open_files_limits(service: Service) -> tuple[str, str]:
    limits = Path(f"/proc/{service.pid}/limits").read_text(encoding="ascii")
    line = next(line for line in limits.splitlines() if line.startswith("Max open files"))
    soft, hard = line.split()[3:5]
    return soft, hard


async def test_serve_lowers_the_default_cap_to_what_the_descriptor_limit_leaves(
    services: Services, tmp_path: Path
) -> None:
    values = settings(tmp_path)
    del values["CHRONOQ_MAX_CONNECTIONS"]  # the default, 1024, which 1024 files cannot hold

    service = await services.start("replica", values, ulimit="-n 1024")

    async with httpx.AsyncClient(base_url=service.base_url, trust_env=False) as client:
        assert (await client.get("/healthz")).status_code == 200
    assert "serving with CHRONOQ_MAX_CONNECTIONS=672" in service.log_tail()


async def test_serve_raises_its_soft_limit_on_open_files_to_the_hard_limit(
    services: Services, tmp_path: Path
) -> None:
    service = await services.start("replica", settings(tmp_path), ulimit="-S -n 256")

    soft, hard = open_files_limits(service)

    assert soft == hard != "256"


async def test_one_client_s_slow_bodies_beyond_its_bound_are_refused_and_another_s_pass(
    services: Services, tmp_path: Path
) -> None:
    # Behind the trusted proxy (127.0.0.1, the default CHRONOQ_FORWARDED_ALLOW_IPS), each
    # forwarded client has its own bound.
    service = await services.start("replica", settings(tmp_path, CHRONOQ_MAX_BODIES_PER_CLIENT="2"))

    def head(client: str) -> bytes:
        return (
            b"POST /v1/schedules HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Authorization: Bearer " + KEY.encode() + b"\r\n"
            b"X-Forwarded-For: " + client.encode() + b"\r\n"
            b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
        )

    async with connections(service, 4) as opened:
        sent = ["198.51.100.1"] * 3 + ["198.51.100.2"]
        for (_, writer), client in zip(opened, sent, strict=True):
            writer.write(head(client))
            await writer.drain()
        started = time.monotonic()
        answers = await asyncio.wait_for(
            asyncio.gather(*(_response(reader) for reader, _ in opened)), BODY_TIMEOUT + 5
        )
        took = time.monotonic() - started

    # One of the first client's three is refused at once; its other two, and the other
    # client's one, were let in and run out of time waiting for the rest of their bodies.
    statuses = [status for status, _, _ in answers]
    assert sorted(statuses[:3]) == [408, 408, 429], answers
    assert statuses[3] == 408, answers
    (refused,) = [answer for answer in answers if answer[0] == 429]
    assert refused[1]["retry-after"] == "1"
    assert b"CHRONOQ_MAX_BODIES_PER_CLIENT" in refused[2]
    assert took >= BODY_TIMEOUT * 0.8
