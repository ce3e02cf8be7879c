"""What a receiver answered, or a service said in a refusal, reaches the operator's terminal
with its control characters escaped (as the logs write them): an escape sequence can neither
clear the screen, set the title, hide text nor write the clipboard, and a line feed cannot
forge a line. The JSON output stays JSON, which escapes them itself. Over a running service:
tests/e2e/test_cli_over_http.py."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from aiohttp import web

from tests.conftest import EMBEDDED_ONLY
from tests.integration.cli import commands
from tests.integration.cli.test_operator_commands import ok, one_line
from tests.integration.conftest import Harness
from tests.receiver import Reply

# Sets the window title, clears the screen, hides what follows, writes the clipboard (OSC 52),
# and a C1 control sequence introducer; a line feed and a carriage return forge a line.
HOSTILE = "\x1b]0;owned\x07\x1b[2J\x1b[8mhidden\x1b]52;c;cm0gLXJmIH4=\x07\x9b31m\rforged"
SHOWN = "\\u001b]0;owned\\u0007\\u001b[2J\\u001b[8mhidden"


def assert_no_control(text: str) -> None:
    """Nothing a terminal acts on but the line feeds that end lines."""
    acted_on = sorted({c for c in text if (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) <= 0x9F})
    assert not acted_on, acted_on


def strings(document: Any) -> Iterator[str]:
    """Every string of a JSON document."""
    if isinstance(document, str):
        yield document
    elif isinstance(document, dict):
        for value in document.values():
            yield from strings(value)
    elif isinstance(document, list):
        for value in document:
            yield from strings(value)


async def _dead_letter(harness: Harness) -> tuple[str, str]:
    """A schedule whose only delivery was dead-lettered with the hostile answer."""
    harness.receiver.always("/evil", Reply(500, body=HOSTILE))
    created = await harness.create(target=harness.webhook("/evil"), max_attempts=1)
    assert await harness.step() == 1
    return created["id"], created["next_occurrence_id"]


@EMBEDDED_ONLY
@pytest.mark.parametrize("command", ["inspect", "dead-letter list", "attempts"])
async def test_a_receiver_s_control_characters_are_shown_escaped(
    harness: Harness, database_url: str, command: str
) -> None:
    schedule_id, occurrence_id = await _dead_letter(harness)
    args = {
        "inspect": ["inspect", schedule_id],
        "dead-letter list": ["dead-letter", "list"],
        "attempts": ["attempts", occurrence_id],
    }[command]

    text = await ok(*args, database_url=database_url)

    assert_no_control(text)
    assert SHOWN in text
    printed = await ok(*args, "--format", "json", database_url=database_url)
    assert_no_control(printed)
    assert any(HOSTILE in value for value in strings(json.loads(printed))), "as the API has it"


@pytest.fixture
async def hostile_service() -> AsyncIterator[str]:
    """A service that refuses everything with a problem whose detail is hostile."""

    async def refuse(request: web.Request) -> web.Response:
        problem = {"type": "about:blank", "title": "Not Found", "status": 404, "detail": HOSTILE}
        return web.json_response(problem, status=404, content_type="application/problem+json")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", refuse)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("command", ["inspect", "dead-letter list", "attempts"])
async def test_a_service_s_control_characters_in_a_refusal_are_shown_escaped(
    hostile_service: str, command: str
) -> None:
    some_id = str(uuid.uuid4())
    args = {
        "inspect": ["inspect", some_id],
        "dead-letter list": ["dead-letter", "list"],
        "attempts": ["attempts", some_id],
    }[command]

    result = await commands.in_process_async(*args, "--url", hostile_service, timeout=60)

    assert result.returncode == 1
    line = one_line(result.stderr)
    assert_no_control(line)
    assert SHOWN in line
