"""Answers that are not the Chronoq API's (a redirect, a proxy's HTML page, JSON of another
shape), from a real local server: the client raises its own `UnexpectedAnswerError` saying
what came back, and the CLI prints it as one line and exits 1. A password in the service's
URL is sent as HTTP Basic credentials, as before, and is in no message of the client and no
log line of httpx's."""

from __future__ import annotations

import asyncio
import base64
import logging
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from chronoq.client import (
    AsyncClient,
    Call,
    ChronoqClientError,
    Client,
    UnexpectedAnswerError,
    UnreachableError,
    calls,
)
from tests.integration.cli import commands

PASSWORD = "s3cret-pw-7f1d"
ELSEWHERE = f"http://sso:{PASSWORD}@127.0.0.1:1/login?next=%2F"


class Service:
    """What the server answers on its paths, and the Authorization headers it was sent."""

    def __init__(self) -> None:
        self.authorization: list[str | None] = []
        self.base_url = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.authorization.append(request.headers.get("Authorization"))
        kind = request.path.split("/")[1]
        if kind == "redirect":
            raise web.HTTPFound(ELSEWHERE)
        if kind == "html":
            return web.Response(text="<html><body>Sign in</body></html>", content_type="text/html")
        if kind == "json":
            return web.json_response({"unexpected": True})
        return web.json_response({"status": "ok", "checks": {}})


@pytest.fixture
async def service() -> AsyncIterator[Service]:
    served = Service()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", served.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    served.base_url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield served
    finally:
        await runner.cleanup()


def closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


async def refusal(base_url: str) -> UnexpectedAnswerError:
    async with AsyncClient(base_url, retries=0, trust_env=False) as client:
        with pytest.raises(UnexpectedAnswerError) as raised:
            await client.get_schedule("0b8a3b0e-8a58-4bb5-9c8e-0f8f3a1c2d4e")
    return raised.value


async def test_a_redirect_is_the_client_s_own_error_naming_where_it_led(service: Service) -> None:
    error = await refusal(f"{service.base_url}/redirect")

    assert error.status == 302
    message = str(error)
    assert "answered 302 Found to http://sso:***@127.0.0.1:1/login" in message
    assert "redirect" in message
    assert PASSWORD not in message


async def test_a_page_that_is_not_json_is_the_client_s_own_error(service: Service) -> None:
    error = await refusal(f"{service.base_url}/html")

    assert error.status == 200
    assert f"GET {service.base_url}/html/v1/schedules/" in str(error)
    assert "text/html, not JSON" in str(error)


async def test_json_of_another_shape_is_the_client_s_own_error(service: Service) -> None:
    error = await refusal(f"{service.base_url}/json")

    assert "JSON the client cannot read" in str(error)


async def test_the_synchronous_client_raises_the_same(service: Service) -> None:
    def read() -> None:
        with Client(f"{service.base_url}/html", retries=0, trust_env=False) as client:
            client.health()

    with pytest.raises(UnexpectedAnswerError, match="text/html, not JSON"):
        await asyncio.to_thread(read)


async def test_a_url_password_is_sent_but_never_shown(
    service: Service, caplog: pytest.LogCaptureFixture
) -> None:
    host = service.base_url.removeprefix("http://")
    with caplog.at_level(logging.INFO, logger="httpx"):
        async with AsyncClient(f"http://ops:{PASSWORD}@{host}", trust_env=False) as client:
            assert (await client.health()).status == "ok"
            with pytest.raises(UnexpectedAnswerError) as raised:
                await client.send(client_call("/html"))

    sent = base64.b64encode(f"ops:{PASSWORD}".encode()).decode()
    assert service.authorization == [f"Basic {sent}", f"Basic {sent}"]
    assert "HTTP Request: GET" in caplog.text
    assert PASSWORD not in caplog.text
    assert PASSWORD not in str(raised.value)


def client_call(path: str) -> Call[Any]:
    """The health call, sent to another path."""
    health = calls.health()
    return Call(health.method, path, health.read)


async def test_an_unreachable_service_is_named_without_its_password() -> None:
    url = f"http://ops:{PASSWORD}@127.0.0.1:{closed_port()}"
    async with AsyncClient(url, retries=0, trust_env=False) as client:
        with pytest.raises(UnreachableError) as raised:
            await client.health()

    assert "cannot reach http://127.0.0.1:" in str(raised.value)
    assert PASSWORD not in str(raised.value)
    assert isinstance(raised.value, ChronoqClientError)


@pytest.mark.parametrize(
    ("path", "said"), [("redirect", "answered 302 Found"), ("html", "text/html, not JSON")]
)
async def test_the_cli_says_what_came_back_in_one_line(
    service: Service, path: str, said: str
) -> None:
    host = service.base_url.removeprefix("http://")
    url = f"http://ops:{PASSWORD}@{host}/{path}"

    result = await commands.in_process_async("list", "--url", url, timeout=60)

    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("chronoq: ")
    assert said in lines[0]
    assert PASSWORD not in result.stderr + result.stdout
