"""Dead letters in the console: filtered, paged, replayed and discarded, one or many."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.conftest import STORES
from tests.integration.conftest import Harness
from tests.integration.ui.pages import post_form, token_of
from tests.receiver import Reply

pytestmark = pytest.mark.parametrize("database_url", STORES[:1], indirect=True)


def shown(html: str) -> list[str]:
    """The occurrence ids the page offers to select, in its order."""
    return re.findall(r'name="occurrence_id" value="([0-9a-f-]{36})"', html)


async def dead_letters(harness: Harness, count: int, **extra: Any) -> list[dict[str, Any]]:
    """`count` schedules whose one attempt fails for good, each dead-lettered."""
    harness.receiver.always("/down", Reply(status=500))
    created = [
        await harness.create(
            target=harness.webhook("/down"), max_attempts=1, event_type="job.run", **extra
        )
        for _ in range(count)
    ]

    async def all_dead() -> bool:
        response = await harness.get("/v1/dead-letters?limit=500")
        return len(response["items"]) >= count

    await harness.step_until(all_dead)
    return created


async def test_the_page_lists_dead_letters_most_recent_first(harness: Harness) -> None:
    await dead_letters(harness, 2)
    items = (await harness.get("/v1/dead-letters"))["items"]
    html = (await harness.client.get("/ui/dead-letters")).text
    assert shown(html) == [d["occurrence_id"] for d in items]
    assert items[0]["last_error"] in html


async def test_the_filters_narrow_the_list(harness: Harness) -> None:
    first, _ = await dead_letters(harness, 2)
    html = (await harness.client.get("/ui/dead-letters", params={"schedule_id": first["id"]})).text
    assert len(shown(html)) == 1
    none = await harness.client.get("/ui/dead-letters", params={"event_type": "other"})
    assert shown(none.text) == []
    bad = await harness.client.get("/ui/dead-letters", params={"schedule_id": "nope"})
    assert bad.status_code == 422


async def test_replay_selected_makes_them_due_and_says_how_many(harness: Harness) -> None:
    await dead_letters(harness, 3)
    html = (await harness.client.get("/ui/dead-letters")).text
    ids = shown(html)
    response = await post_form(
        harness,
        "/ui/dead-letters/replay",
        {"token": token_of(html), "occurrence_id": ids[:2], "schedule_id": "", "event_type": ""},
    )
    assert response.status_code == 303
    after = await harness.client.get(response.headers["location"])
    assert "2 dead letters replayed" in after.text
    assert shown(after.text) == ids[2:]


async def test_discard_selected_and_one_row_at_a_time(harness: Harness) -> None:
    await dead_letters(harness, 3)
    html = (await harness.client.get("/ui/dead-letters")).text
    ids = shown(html)
    token = token_of(html)
    many = await post_form(
        harness, "/ui/dead-letters/discard", {"token": token, "occurrence_id": ids[:2]}
    )
    assert many.status_code == 303
    assert "2 dead letters discarded" in (await harness.client.get(many.headers["location"])).text
    one = await post_form(harness, f"/ui/dead-letters/{ids[2]}/replay", {"token": token})
    assert one.status_code == 303
    assert "1 dead letter replayed" in (await harness.client.get(one.headers["location"])).text
    assert (await harness.get("/v1/dead-letters"))["items"] == []


async def test_a_replayed_dead_letter_is_delivered(harness: Harness) -> None:
    (created,) = await dead_letters(harness, 1)
    harness.receiver.always("/down", Reply(status=200))
    html = (await harness.client.get("/ui/dead-letters")).text
    (occurrence,) = shown(html)
    response = await post_form(
        harness, f"/ui/dead-letters/{occurrence}/replay", {"token": token_of(html)}
    )
    assert response.status_code == 303

    async def delivered() -> bool:
        items = await harness.occurrences(created["id"])
        return bool(items[0]["status"] == "delivered")

    await harness.step_until(delivered)


async def test_nothing_selected_is_a_page_saying_so(harness: Harness) -> None:
    await dead_letters(harness, 1)
    html = (await harness.client.get("/ui/dead-letters")).text
    response = await post_form(harness, "/ui/dead-letters/replay", {"token": token_of(html)})
    assert response.status_code == 422
    assert "Select at least one" in response.text
    assert len((await harness.get("/v1/dead-letters"))["items"]) == 1


async def test_the_redirect_keeps_the_filters(harness: Harness) -> None:
    await dead_letters(harness, 1)
    html = (await harness.client.get("/ui/dead-letters", params={"event_type": "job.run"})).text
    response = await post_form(
        harness,
        "/ui/dead-letters/replay",
        {"token": token_of(html), "occurrence_id": shown(html), "event_type": "job.run"},
    )
    assert response.headers["location"].startswith("/ui/dead-letters?event_type=job.run&")


async def test_the_dead_letters_page_is_paged_with_the_api_cursor(harness: Harness) -> None:
    harness.receiver.always("/down", Reply(status=500))
    specs = [
        {
            "event_type": "bulk",
            "payload": {},
            "target": harness.webhook("/down"),
            "trigger": {"type": "immediate"},
            "max_attempts": 1,
        }
        for _ in range(52)
    ]
    assert (await harness.client.post("/v1/schedules/batch", json={"items": specs})).is_success

    async def all_dead() -> bool:
        return len((await harness.get("/v1/dead-letters?limit=500"))["items"]) == 52

    await harness.step_until(all_dead, timeout=30)
    api = [d["occurrence_id"] for d in (await harness.get("/v1/dead-letters?limit=500"))["items"]]
    first = (await harness.client.get("/ui/dead-letters")).text
    assert shown(first) == api[:50]
    link = re.search(r'<a rel="next" href="([^"]+)"', first)
    assert link is not None
    second = (await harness.client.get(link.group(1).replace("&amp;", "&"))).text
    assert shown(second) == api[50:]
