"""Finding what fails in the console, as server-rendered HTML (no script): the failing filter
and badge, the last error, sorts, the due view, relative times, dead letters by schedule
name, and on a schedule's page its target and labels, Replay of a dead letter, the edit
form under If-Match, and what a paused schedule says."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from html import escape
from typing import Any

import pytest

from tests.conftest import STORES
from tests.integration.conftest import Harness
from tests.integration.ui.pages import KEYS, READER, WRITER, basic, post_form, spec, token_of
from tests.receiver import Reply

pytestmark = pytest.mark.parametrize("database_url", STORES[:1], indirect=True)

LONG_ERROR = "upstream said: " + "x" * 300


async def _failing(harness: Harness, name: str = "nightly-report", **extra: Any) -> dict[str, Any]:
    """A recurring schedule whose first occurrence was dead-lettered: still pending."""
    reply = Reply(503, body=LONG_ERROR)
    return await harness.failing(reply, name=name, event_type="report.due", **extra)


def rows(html: str, table: str) -> list[str]:
    body = html.split(f'id="{table}"', 1)[1].split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    return re.findall(r"<tr[ >].*?</tr>", body, flags=re.S)


async def test_a_failing_schedule_shows_a_red_badge_its_failures_and_its_last_error(
    harness: Harness,
) -> None:
    broken = await _failing(harness)
    healthy = await harness.create(**spec(harness, name="healthy"))

    html = (await harness.client.get("/ui/schedules")).text
    by_name = {("nightly-report" in row): row for row in rows(html, "schedules")}

    failing_row, healthy_row = by_name[True], by_name[False]
    assert 'class="status status-pending"' in failing_row
    assert "failing \u00d71" in failing_row
    assert "status-failing" not in healthy_row
    assert healthy["id"] in healthy_row
    last_error = re.search(r'class="error-text last-error" title="([^"]*)">([^<]*)<', failing_row)
    assert last_error is not None
    assert last_error.group(1).startswith("HTTP 503")
    assert LONG_ERROR[:100] in last_error.group(1)
    assert len(last_error.group(2)) == 80
    assert last_error.group(2).endswith("…")

    only_failing = (await harness.client.get("/ui/schedules?failing=true")).text
    assert [broken["id"] in row for row in rows(only_failing, "schedules")] == [True]
    assert 'name="failing" value="true" checked' in only_failing


async def test_prefix_search_sorts_and_the_due_view(harness: Harness) -> None:
    broken = await _failing(harness, name="report-nightly")
    soon = datetime.now(UTC) + timedelta(minutes=3, seconds=30)
    early = await harness.create(
        **spec(harness, name="report-soon", trigger={"type": "once", "at": soon.isoformat()})
    )
    later = await harness.create(
        **spec(
            harness,
            name="other-later",
            trigger={"type": "once", "at": (soon + timedelta(days=2)).isoformat()},
        )
    )

    async def listed(query: str) -> list[str]:
        html = (await harness.client.get(f"/ui/schedules?{query}")).text
        found = [
            re.search(r"/ui/schedules/([0-9a-f-]{36})", row) for row in rows(html, "schedules")
        ]
        return [m.group(1) for m in found if m]

    assert set(await listed("name_prefix=report-")) == {broken["id"], early["id"]}
    assert await listed("name_prefix=report_") == []
    assert await listed("sort=next_fire_at") == [early["id"], broken["id"], later["id"]]
    assert (await listed("sort=failures"))[0] == broken["id"]
    assert await listed("due=1h") == [early["id"], broken["id"]]
    assert await listed("due=overdue") == []

    html = (await harness.client.get("/ui/schedules?name_prefix=report-")).text
    # Sort links keep the filters; the current sort is marked.
    assert 'href="/ui/schedules?name_prefix=report-&amp;sort=next_fire_at"' in html
    assert re.search(r'aria-sort="descending"><a class="sort"[^>]*id="sort-created"', html)
    # Relative times beside the UTC instants, written by the server.
    assert "(in 3 min)" in html
    assert re.search(r"\(\d+ s ago\)|\(now\)", html)

    refused = await harness.client.get("/ui/schedules?sort=oldest")
    assert refused.status_code == 422
    assert "sort" in refused.text


async def test_dead_letters_name_and_link_their_schedule(harness: Harness) -> None:
    broken = await _failing(harness, name="nightly-report")

    html = (await harness.client.get("/ui/dead-letters")).text

    (row,) = rows(html, "dead-letters")
    assert f'<a href="/ui/schedules/{broken["id"]}">nightly-report</a>' in row


async def test_the_page_shows_target_and_labels_and_replays_a_dead_letter(
    harness: Harness,
) -> None:
    broken = await _failing(harness, labels={"team": "billing"})
    page = f"/ui/schedules/{broken['id']}"
    html = (await harness.client.get(page)).text

    target = html.split('id="target">', 1)[1].split("</dd>", 1)[0]
    assert escape(harness.receiver.url("/broken")) in target
    assert "team:billing" in html.split('id="labels">', 1)[1].split("</dd>", 1)[0]
    assert 'id="failing">failing \u00d71' in html
    oid = broken["next_occurrence_id"]
    # One Replay button: on the dead-lettered occurrence, not on the pending next one.
    assert re.findall(r'action="/ui/dead-letters/([0-9a-f-]+)/replay"', html) == [oid]
    assert html.count(">Replay</button>") == 1

    harness.receiver.always("/broken", Reply(200))
    done = await post_form(
        harness,
        f"/ui/dead-letters/{oid}/replay",
        {"token": token_of(html), "return_to": broken["id"]},
    )
    assert done.status_code == 303
    assert done.headers["location"] == f"{page}?done=replayed"
    after = (await harness.client.get(done.headers["location"])).text
    assert "Replayed: the dead letter is due now." in after
    assert (await harness.get(f"/v1/occurrences/{oid}"))["status"] == "pending"


async def test_a_paused_schedule_lists_no_fire_times_and_its_replay_waits_for_resume(
    harness: Harness,
) -> None:
    broken = await _failing(harness)
    page = f"/ui/schedules/{broken['id']}"
    paused = await harness.client.post(f"/v1/schedules/{broken['id']}/pause")
    assert paused.status_code == 200

    html = (await harness.client.get(page)).text
    assert 'id="paused-note"' in html
    assert '<ol class="upcoming">' not in html

    oid = broken["next_occurrence_id"]
    done = await post_form(
        harness,
        f"/ui/dead-letters/{oid}/replay",
        {"token": token_of(html), "return_to": broken["id"]},
    )
    after = (await harness.client.get(done.headers["location"])).text
    assert "waits until this schedule is resumed" in after
    occurrence = await harness.get(f"/v1/occurrences/{oid}")
    assert (occurrence["status"], occurrence["available_at"]) == ("pending", None)

    # From the dead letters page too: the notice says which wait.
    second = await _failing(harness, name="second")
    listing = (await harness.client.get("/ui/dead-letters")).text
    done = await post_form(
        harness,
        "/ui/dead-letters/replay",
        {"token": token_of(listing), "occurrence_id": [second["next_occurrence_id"]]},
    )
    assert "held" not in done.headers["location"]
    assert "due now" in (await harness.client.get(done.headers["location"])).text


async def test_the_edit_form_patches_under_the_version_it_was_loaded_at(
    harness: Harness,
) -> None:
    created = await harness.create(**spec(harness, name="edited", labels={"team": "blue"}))
    page = f"/ui/schedules/{created['id']}"
    html = (await harness.client.get(page)).text
    assert 'id="edit-form"' in html
    assert f'name="version" value="{created["version"]}"' in html
    assert ">team:blue</textarea>" in html
    token = token_of(html)
    moved = harness.receiver.url("/moved")

    done = await post_form(
        harness,
        f"{page}/edit",
        {
            "token": token,
            "version": str(created["version"]),
            "target_url": moved,
            "max_attempts": "7",
            "labels": "team:red\nowner:ops\n",
        },
    )
    assert done.status_code == 303, done.text
    assert done.headers["location"] == f"{page}?done=saved"
    after = await harness.get(f"/v1/schedules/{created['id']}")
    assert (after["target"]["url"], after["max_attempts"]) == (moved, 7)
    assert after["labels"] == {"owner": "ops", "team": "red"}
    assert after["version"] == created["version"] + 1
    events = (await harness.get(f"/v1/schedules/{created['id']}/events"))["items"]
    assert set(events[-1]["fields"]) == {"target", "max_attempts", "labels"}

    # The same form again (loaded at the old version): refused, nothing overwritten.
    stale = await post_form(
        harness,
        f"{page}/edit",
        {
            "token": token,
            "version": str(created["version"]),
            "target_url": moved,
            "max_attempts": "2",
            "labels": "",
        },
    )
    assert stale.status_code == 409
    assert "changed since you loaded it" in stale.text
    assert f'name="version" value="{after["version"]}"' in stale.text
    assert await harness.get(f"/v1/schedules/{created['id']}") == after

    # Input the API refuses is shown beside its field; nothing stored.
    for fields, named in (
        ({"max_attempts": "0"}, "max_attempts"),
        ({"max_attempts": "many"}, "max_attempts"),
        ({"target_url": "ftp://example.com/x"}, "target_url"),
        ({"labels": "no separator"}, "labels"),
    ):
        form = {
            "token": token,
            "version": str(after["version"]),
            "target_url": moved,
            "max_attempts": "7",
            "labels": "owner:ops\nteam:red",
            **fields,
        }
        refused = await post_form(harness, f"{page}/edit", form)
        assert refused.status_code == 422, fields
        assert "fields marked below are refused" in refused.text
        assert re.findall(r'<span class="field-error" id="error-(\w+)">', refused.text) == [named]
        assert f'aria-describedby="error-{named}"' in refused.text
    assert await harness.get(f"/v1/schedules/{created['id']}") == after

    # Every field refused at once is shown beside its own input, each with its message.
    refused = await post_form(
        harness,
        f"{page}/edit",
        {
            "token": token,
            "version": str(after["version"]),
            "target_url": "ftp://example.com/x",
            "max_attempts": "many",
            "labels": "owner:ops\nno separator\nteam:red\nalso none",
        },
    )
    assert refused.status_code == 422
    errors = dict(
        re.findall(r'<span class="field-error" id="error-(\w+)">([^<]*)</span>', refused.text)
    )
    assert set(errors) == {"target_url", "max_attempts", "labels"}
    assert errors["max_attempts"] == "a whole number"
    assert errors["labels"] == "lines 2, 4: not key:value"
    assert 'name="max_attempts" value="many"' in refused.text  # what was typed, kept
    assert await harness.get(f"/v1/schedules/{created['id']}") == after


async def test_an_edit_keeps_a_redacted_secret_it_sends_back(harness: Harness) -> None:
    target = harness.webhook("/hook?page=1&api_key=sekrit-query-value")
    created = await harness.create(**spec(harness, target=target))
    page = f"/ui/schedules/{created['id']}"
    html = (await harness.client.get(page)).text
    assert "sekrit" not in html
    shown = re.search(r'name="target_url" value="([^"]*)"', html)
    assert shown is not None
    assert "api_key=***" in shown.group(1)

    done = await post_form(
        harness,
        f"{page}/edit",
        {
            "token": token_of(html),
            "version": str(created["version"]),
            "target_url": shown.group(1).replace("&amp;", "&").replace("page=1", "page=2"),
            "max_attempts": str(created["max_attempts"]),
            "labels": "",
        },
    )

    assert done.status_code == 303, done.text
    async with harness.database.engine.connect() as conn:
        import sqlalchemy as sa

        from app.store.schema.tables import schedules

        stored = (
            await conn.execute(
                sa.select(schedules.c.target).where(schedules.c.id == uuid.UUID(created["id"]))
            )
        ).scalar_one()
    assert "api_key=sekrit-query-value" in str(stored)
    assert "page=2" in str(stored)


async def test_a_read_key_sees_no_replay_button_nor_edit_form(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(api_keys=KEYS) as h:
        h.receiver.always("/broken", Reply(503))
        response = await h.client.post(
            "/v1/schedules",
            json=spec(
                h, target=h.webhook("/broken"), max_attempts=1, trigger={"type": "immediate"}
            ),
            headers={"Authorization": f"Bearer {WRITER}"},
        )
        created = response.json()
        await h.step()
        page = f"/ui/schedules/{created['id']}"
        reader = (await h.client.get(page, headers=basic(READER))).text
        writer = (await h.client.get(page, headers=basic(WRITER))).text
        assert ">Replay</button>" in writer
        assert 'id="edit-form"' in writer
        assert ">Replay</button>" not in reader
        assert 'id="edit-form"' not in reader
        assert 'method="post"' not in reader
        refused = await post_form(
            h,
            f"{page}/edit",
            {"token": token_of(writer), "version": "1", "max_attempts": "3"},
            basic(READER),
        )
        assert refused.status_code == 403


async def test_an_edit_that_moves_a_redacted_secret_elsewhere_is_refused(harness: Harness) -> None:
    target = harness.webhook(headers={"X-Api-Key": "sekrit-header-value"})
    created = await harness.create(**spec(harness, target=target))
    page = f"/ui/schedules/{created['id']}"
    html = (await harness.client.get(page)).text

    refused = await post_form(
        harness,
        f"{page}/edit",
        {
            "token": token_of(html),
            "version": str(created["version"]),
            "target_url": "http://127.0.0.1:9/elsewhere",
            "max_attempts": str(created["max_attempts"]),
            "labels": "",
        },
    )

    assert refused.status_code == 422
    assert 'id="edit-target-url"' in refused.text
    assert (
        'aria-invalid="true"' in refused.text.split('id="edit-target-url"', 1)[1].split(">", 1)[0]
    )
    assert "sekrit" not in refused.text
    assert (await harness.get(f"/v1/schedules/{created['id']}"))["version"] == created["version"]


async def test_a_failed_one_shot_is_in_the_failing_list_without_a_second_badge(
    harness: Harness,
) -> None:
    harness.receiver.always("/gone", Reply(410))
    once = await harness.create(
        **spec(
            harness, target=harness.webhook("/gone"), trigger={"type": "immediate"}, max_attempts=1
        )
    )
    assert await harness.step() == 1

    html = (await harness.client.get("/ui/schedules?failing=true")).text

    (row,) = rows(html, "schedules")
    assert once["id"] in row
    assert 'class="status status-failed"' in row
    assert "status-failing" not in row
