"""A schedule's own retry policy: shown, changed, cleared, and what its retries wait."""

from __future__ import annotations

from datetime import datetime

from tests.integration.conftest import Harness
from tests.receiver import Reply


async def test_a_schedule_retries_on_its_own_policy(harness: Harness) -> None:
    harness.receiver.script("/flaky", Reply(500))
    created = await harness.create(
        target=harness.webhook("/flaky"),
        retry={"base_delay_seconds": 120, "max_delay_seconds": 600, "jitter": False},
    )
    assert created["retry"] == {
        "base_delay_seconds": 120.0,
        "max_delay_seconds": 600.0,
        "jitter": False,
    }

    assert await harness.step() == 1
    (occurrence,) = await harness.occurrences(created["id"])
    first = harness.receiver.requests[0].at
    waited = datetime.fromisoformat(occurrence["available_at"]).timestamp() - first
    # Its own first delay, without jitter: not the service's 0.05 s up to 0.2 s.
    assert 100 < waited < 130


async def test_patch_replaces_the_policy_whole_and_null_clears_it(harness: Harness) -> None:
    created = await harness.create(
        trigger={"type": "cron", "expression": "0 9 * * *"},
        retry={"base_delay_seconds": 0.1, "max_delay_seconds": 0.2},
    )
    path = f"/v1/schedules/{created['id']}"
    replaced = await harness.client.patch(path, json={"retry": {"jitter": False}})
    assert replaced.status_code == 200, replaced.text
    assert replaced.json()["retry"] == {
        "base_delay_seconds": None,
        "max_delay_seconds": None,
        "jitter": False,
    }
    cleared = await harness.client.patch(path, json={"retry": None})
    assert cleared.status_code == 200, cleared.text
    assert cleared.json()["retry"] is None
    assert (await harness.get(path))["retry"] is None
