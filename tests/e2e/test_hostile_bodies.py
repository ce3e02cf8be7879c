"""Bodies built to be costly to validate against `chronoq serve` itself: the replica refuses
them without doing the work they ask for, and keeps answering its probes meanwhile."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.processes import Services

pytestmark = pytest.mark.e2e

# Under CHRONOQ_MAX_REQUEST_BYTES (8 MiB): a valid create plus 600,001 names it does not know.
UNKNOWN_FIELDS = 600_001


def _create_with_unknown_fields() -> bytes:
    body: dict[str, object] = {
        "event_type": "hostile.body",
        "target": {"type": "webhook", "url": "http://127.0.0.1:9/hook"},
        "trigger": {"type": "immediate"},
    }
    body.update({f"u{n:06d}": 1 for n in range(UNKNOWN_FIELDS)})
    raw = json.dumps(body, separators=(",", ":")).encode()
    assert len(raw) < 8 * 1024 * 1024
    return raw


async def test_healthz_answers_while_bodies_of_unknown_fields_are_refused(
    services: Services, tmp_path: Path
) -> None:
    service = await services.start(
        "replica", {"DATABASE_URL": f"sqlite:///{tmp_path / 'chronoq.db'}"}
    )
    raw = _create_with_unknown_fields()
    # What no server can avoid: reading the JSON text (this machine, now). Refusing the
    # unknown fields adds nothing to it that a probe would notice (before, validating them
    # and listing 600,001 errors held the event loop several times as long).
    started = time.monotonic()
    json.loads(raw)
    parse = time.monotonic() - started
    async with httpx.AsyncClient(base_url=service.base_url, trust_env=False, timeout=60) as client:

        async def create() -> httpx.Response:
            return await client.post(
                "/v1/schedules", content=raw, headers={"Content-Type": "application/json"}
            )

        creates = [asyncio.create_task(create()) for _ in range(2)]
        probes: list[float] = []
        while not all(task.done() for task in creates):
            started = time.monotonic()
            assert (await client.get("/healthz")).status_code == 200
            probes.append(time.monotonic() - started)
        answers = [await task for task in creates]
        listed = (await client.get("/v1/schedules")).json()["items"]

    # Generous: both bodies' parses back to back, and a second to spare.
    assert max(probes) < 2 * parse + 1.0, (parse, probes)
    for answer in answers:
        assert answer.status_code == 422, answer.text
        problem = answer.json()
        assert problem["errors"] == [
            {"pointer": "#/u000000", "field": "u000000", "detail": "Extra inputs are not permitted"}
        ]
    assert listed == []
