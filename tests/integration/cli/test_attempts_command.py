"""`chronoq attempts OCCURRENCE_ID`: the attempt log from a shell, as the HTTP API has it."""

from __future__ import annotations

import uuid

from tests.conftest import EMBEDDED_ONLY
from tests.integration.cli.test_operator_commands import as_json, chronoq, ok, one_line
from tests.integration.conftest import Harness
from tests.receiver import Reply


async def _retried_then_delivered(harness: Harness) -> str:
    harness.receiver.script("/hook", Reply(503, body="busy"))
    created = await harness.create()
    occurrence_id = str(created["next_occurrence_id"])

    async def delivered() -> bool:
        found = await harness.get(f"/v1/occurrences/{occurrence_id}")
        return bool(found["status"] == "delivered")

    await harness.step_until(delivered)
    return occurrence_id


@EMBEDDED_ONLY
async def test_attempts_prints_each_attempt_oldest_first(
    harness: Harness, database_url: str
) -> None:
    occurrence_id = await _retried_then_delivered(harness)

    out = await ok("attempts", occurrence_id, database_url=database_url)

    header, first, second = out.splitlines()
    assert header.split() == [
        "ATTEMPT",
        "STARTED",
        "AT",
        "DURATION",
        "OUTCOME",
        "STATUS",
        "ERROR",
        "REPLICA",
    ]
    assert first.split()[0] == "1"
    assert " retry " in first
    assert " 503 " in first
    assert "HTTP 503: busy" in first
    assert second.split()[0] == "2"
    assert " delivered " in second
    assert " 200 " in second


async def test_attempts_json_is_what_the_http_api_lists(
    harness: Harness, database_url: str
) -> None:
    occurrence_id = await _retried_then_delivered(harness)

    document = await as_json("attempts", occurrence_id, database_url=database_url)

    page = await harness.get(f"/v1/occurrences/{occurrence_id}/attempts")
    assert document == page["items"]
    assert [a["outcome"] for a in document] == ["retry", "delivered"]


@EMBEDDED_ONLY
async def test_attempts_limit_keeps_the_oldest(harness: Harness, database_url: str) -> None:
    occurrence_id = await _retried_then_delivered(harness)

    document = await as_json("attempts", occurrence_id, "--limit", "1", database_url=database_url)

    assert [a["attempt"] for a in document] == [1]


@EMBEDDED_ONLY
async def test_attempts_of_an_unknown_occurrence_exit_1_with_one_line(database_url: str) -> None:
    unknown = uuid.uuid4()

    result = await chronoq("attempts", str(unknown), database_url=database_url)

    assert result.returncode == 1
    assert str(unknown) in one_line(result.stderr)


@EMBEDDED_ONLY
async def test_attempts_of_a_malformed_id_exit_2(database_url: str) -> None:
    result = await chronoq("attempts", "nope", database_url=database_url)

    assert result.returncode == 2
    assert "not a UUID" in one_line(result.stderr)
