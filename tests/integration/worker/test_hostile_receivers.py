"""A receiver is untrusted: its reply is judged on its status line, its body never holds a
lane, and this replica's own shortages are never charged to it."""

from __future__ import annotations

import asyncio
import errno
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.abc import ResolveResult

from app.domain.occurrence import RESPONSE_EXCERPT_BYTES
from tests.dns import FakeDNS
from tests.integration.conftest import Harness
from tests.receiver import Receiver


@pytest.fixture
async def streaming() -> AsyncIterator[dict[str, str]]:
    """Routes that answer at once and then take their time with the body."""

    async def trickle(request: web.Request) -> web.StreamResponse:
        # 200 at once, then a chunk every 0.2 s for 8 s.
        response = web.StreamResponse(status=int(request.query.get("status", "200")))
        await response.prepare(request)
        for _ in range(40):
            await response.write(b"x" * 16)
            await asyncio.sleep(0.2)
        await response.write_eof()
        return response

    async def flood(request: web.Request) -> web.StreamResponse:
        # 200 and 16 MiB as fast as the socket takes them, with no Content-Length.
        response = web.StreamResponse(status=200)
        await response.prepare(request)
        chunk = b"y" * 65536
        for _ in range(256):
            await response.write(chunk)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/trickle", trickle)
    app.router.add_post("/flood", flood)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield {
            "trickle": f"http://127.0.0.1:{port}/trickle",
            "trickle_503": f"http://127.0.0.1:{port}/trickle?status=503",
            "flood": f"http://127.0.0.1:{port}/flood",
        }
    finally:
        await runner.cleanup()


async def _occurrence(harness: Harness, schedule_id: str) -> dict[str, Any]:
    (occurrence,) = await harness.occurrences(schedule_id)
    return occurrence


async def _attempts(harness: Harness, occurrence_id: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = (await harness.get(f"/v1/occurrences/{occurrence_id}/attempts"))[
        "items"
    ]
    return items


async def test_a_2xx_whose_body_trickles_is_delivered_without_waiting_for_it(
    harness: Harness, streaming: dict[str, str]
) -> None:
    # The dispatch timeout is 2 s; the body takes 8 s. Before, the attempt timed out
    # reading it and the delivered occurrence was retried.
    created = await harness.create(
        target={"type": "webhook", "url": streaming["trickle"]}, max_attempts=1
    )

    assert await harness.step() == 1

    occurrence = await _occurrence(harness, created["id"])
    assert (occurrence["status"], occurrence["attempts"]) == ("delivered", 1)
    (attempt,) = await _attempts(harness, created["next_occurrence_id"])
    assert attempt["outcome"] == "delivered"
    assert attempt["status_code"] == 200
    assert attempt["duration_ms"] < 1900, "the body was waited for"


async def test_a_5xx_whose_body_trickles_is_retried_on_its_status(
    harness: Harness, streaming: dict[str, str]
) -> None:
    created = await harness.create(
        target={"type": "webhook", "url": streaming["trickle_503"]}, max_attempts=2
    )

    assert await harness.step() == 1

    occurrence = await _occurrence(harness, created["id"])
    assert (occurrence["status"], occurrence["attempts"]) == ("pending", 1)
    assert occurrence["last_error"].startswith("HTTP 503")


async def test_a_2xx_with_a_huge_body_keeps_only_its_excerpt(
    harness: Harness, streaming: dict[str, str]
) -> None:
    created = await harness.create(target={"type": "webhook", "url": streaming["flood"]})

    assert await harness.step() == 1

    (attempt,) = await _attempts(harness, created["next_occurrence_id"])
    assert attempt["outcome"] == "delivered"
    assert attempt["response_excerpt"] == "y" * RESPONSE_EXCERPT_BYTES


class _OutOfDescriptors(FakeDNS):
    """DNS of a process out of file descriptors: each lookup of the sink fails with
    EMFILE (what getaddrinfo raises then) until `recover()`."""

    def __init__(self, names: dict[str, list[str]]) -> None:
        super().__init__(names)
        self.short = True

    def recover(self) -> None:
        self.short = False

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        if self.short:
            self.lookups[host] += 1
            raise OSError(errno.EMFILE, "Too many open files")
        return await super().resolve(host, port, family)


async def test_a_replica_out_of_file_descriptors_charges_no_attempt(
    make_harness: Callable[..., Any], receiver: Receiver
) -> None:
    dns = _OutOfDescriptors({"hooks.internal": ["127.0.0.1"]})
    async with make_harness(dns=dns) as harness:
        url = f"http://hooks.internal:{receiver.port}/hook"
        created = await harness.create(target={"type": "webhook", "url": url}, max_attempts=1)

        assert await harness.step() == 1

        assert dns.lookups["hooks.internal"] >= 1
        occurrence = await _occurrence(harness, created["id"])
        assert (occurrence["status"], occurrence["attempts"]) == ("pending", 0)
        assert "Too many open files" in occurrence["last_error"]
        assert await _attempts(harness, created["next_occurrence_id"]) == []
        metrics = (await harness.client.get("/metrics")).text.splitlines()
        (unsent,) = [
            line for line in metrics if line.startswith("chronoq_occurrences_unsent_total ")
        ]
        assert float(unsent.split()[1]) >= 1

        dns.recover()

        async def delivered() -> bool:
            return bool((await _occurrence(harness, created["id"]))["status"] == "delivered")

        await harness.step_until(delivered)
        assert [r.headers["X-Attempt"] for r in receiver.requests] == ["1"]
        (attempt,) = await _attempts(harness, created["next_occurrence_id"])
        assert (attempt["attempt"], attempt["outcome"]) == (1, "delivered")
