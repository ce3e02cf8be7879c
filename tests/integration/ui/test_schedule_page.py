"""One schedule in the console: its definition, its coming fire times, its occurrences and
the buttons that change it."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from html import escape
from typing import Any

import pytest

from tests.conftest import STORES
from tests.integration.conftest import Harness
from tests.integration.ui.pages import KEYS, WRITER, basic, post_form, spec, token_of
from tests.receiver import Reply

pytestmark = pytest.mark.parametrize("database_url", STORES[:1], indirect=True)


async def test_the_page_shows_the_definition_with_secrets_redacted_as_the_api_does(
    harness: Harness,
) -> None:
    target = harness.webhook(
        headers={"X-Api-Key": "sekrit-header-value", "X-Team": "blue"},
        signing_secret="whsec_" + "c2VjcmV0LXNpZ25pbmcta2V5LTEyMzQ1Njc4OTA=",
    )
    target["url"] = target["url"].replace("http://", "http://user:sekrit-password@")
    created = await harness.create(**spec(harness, target=target, name="nightly"))
    response = await harness.client.get(f"/ui/schedules/{created['id']}")
    assert response.status_code == 200
    html = response.text
    assert "sekrit" not in html
    assert "c2VjcmV0LXNpZ25pbmcta2V5" not in html
    api = await harness.get(f"/v1/schedules/{created['id']}")
    # The API's redacted forms, exactly.
    assert api["target"]["signing_secret"] in html
    assert api["target"]["url"] in html
    assert "X-Team" in html
    assert "nightly" in html


async def test_the_page_shows_credential_headers_and_query_parameters_redacted(
    harness: Harness,
) -> None:
    target = harness.webhook(
        "/hook?page=2&api_key=sekrit-query-value",
        headers={"X-Auth": "sekrit-auth", "Api-Signature": "sekrit-sig", "X-Team": "blue"},
    )
    created = await harness.create(**spec(harness, target=target))

    html = (await harness.client.get(f"/ui/schedules/{created['id']}")).text
    listing = (await harness.client.get("/ui/schedules")).text

    for page in (html, listing):
        assert "sekrit" not in page
        assert escape(f"{harness.receiver.url()}?page=2&api_key=***") in page
    assert "blue" in html


def _upcoming(html: str) -> str:
    """The page's list of next fire times."""
    start = html.index('<ol class="upcoming">')
    return html[start : html.index("</ol>", start)]


async def test_the_page_lists_the_next_ten_fire_times_of_the_trigger(harness: Harness) -> None:
    created = await harness.create(**spec(harness))
    html = _upcoming((await harness.client.get(f"/ui/schedules/{created['id']}")).text)
    times = re.findall(r'<time datetime="([^"]+)">', html)
    assert len(times) == 10
    instants = [datetime.fromisoformat(t) for t in times]
    assert instants == sorted(instants)
    assert all(at > datetime.now(UTC) and at.minute % 5 == 0 for at in instants)


async def test_a_bounded_schedule_shows_only_the_ticks_it_has_left(harness: Harness) -> None:
    created = await harness.create(**spec(harness, max_occurrences=3))
    html = _upcoming((await harness.client.get(f"/ui/schedules/{created['id']}")).text)
    assert len(re.findall(r"<time datetime=", html)) == 3


async def test_a_payload_with_a_script_shows_as_text(harness: Harness) -> None:
    created = await harness.create(
        **spec(harness, payload={"html": "<script>alert('x')</script>"}, labels={"k": "<i>v"})
    )
    html = (await harness.client.get(f"/ui/schedules/{created['id']}")).text
    assert "<script>alert" not in html
    assert "&lt;script&gt;alert(" in html
    assert "<i>v" not in html


async def test_the_occurrences_are_listed_latest_first_and_paged(harness: Harness) -> None:
    created = await harness.create(**spec(harness))
    path = f"/v1/schedules/{created['id']}"
    for _ in range(21):
        assert (await harness.client.post(path + "/trigger")).status_code == 202
    everything = await harness.occurrences(created["id"])
    assert len(everything) == 22
    ids = [o["occurrence_id"] for o in everything]

    first = (await harness.client.get(f"/ui/schedules/{created['id']}")).text
    shown = re.findall(r'<small class="id">([0-9a-f-]{36})</small>', first)
    shown = [i for i in shown if i != created["id"]]
    assert shown == ids[:20]
    link = re.search(r'<a rel="next" href="([^"]+)"', first)
    assert link is not None
    second = (await harness.client.get(link.group(1).replace("&amp;", "&"))).text
    rest = [i for i in re.findall(r'<small class="id">([0-9a-f-]{36})</small>', second)]
    assert [i for i in rest if i != created["id"]] == ids[20:]


async def test_an_unknown_schedule_is_a_404_page(harness: Harness) -> None:
    missing = await harness.client.get("/ui/schedules/0190c0de-0000-7000-8000-000000000000")
    assert missing.status_code == 404
    assert missing.headers["content-type"].startswith("text/html")
    not_an_id = await harness.client.get("/ui/schedules/<script>")
    assert not_an_id.status_code == 404
    assert "<script>" not in not_an_id.text


@pytest.mark.parametrize(
    ("action", "status", "notice"),
    [
        ("pause", "paused", "Paused"),
        ("trigger", "pending", "Triggered"),
        ("cancel", "cancelled", "Cancelled"),
    ],
)
async def test_a_button_changes_the_schedule_and_redirects_back_with_the_outcome(
    harness: Harness, action: str, status: str, notice: str
) -> None:
    created = await harness.create(**spec(harness))
    page = f"/ui/schedules/{created['id']}"
    token = token_of((await harness.client.get(page)).text)
    response = await post_form(harness, f"{page}/{action}", {"token": token})
    assert response.status_code == 303
    assert response.headers["location"].startswith(page + "?done=")
    assert await harness.schedule_status(created["id"]) == status
    shown = await harness.client.get(response.headers["location"])
    assert notice in shown.text
    assert f'id="status">{status}<' in shown.text


async def test_resume_is_offered_for_a_paused_schedule_and_works(harness: Harness) -> None:
    created = await harness.create(**spec(harness))
    await harness.client.post(f"/v1/schedules/{created['id']}/pause")
    page = f"/ui/schedules/{created['id']}"
    html = (await harness.client.get(page)).text
    assert f'action="{page}/resume"' in html
    assert f'action="{page}/pause"' not in html
    response = await post_form(harness, f"{page}/resume", {"token": token_of(html)})
    assert response.status_code == 303
    assert await harness.schedule_status(created["id"]) == "pending"


async def test_a_refused_change_is_a_page_naming_why(harness: Harness) -> None:
    created = await harness.create(**spec(harness))
    page = f"/ui/schedules/{created['id']}"
    stale = (await harness.client.get(page)).text
    await harness.client.delete(f"/v1/schedules/{created['id']}")
    html = (await harness.client.get(page)).text
    # A cancelled schedule offers no button that would fail ...
    assert f"{page}/pause" not in html
    assert f"{page}/cancel" not in html
    # ... and a stale page's form is refused with the reason.
    response = await post_form(harness, f"{page}/pause", {"token": token_of(stale)})
    assert response.status_code == 409
    assert "cancelled" in response.text


async def test_each_occurrence_shows_its_attempts_with_the_reply_as_text(
    harness: Harness,
) -> None:
    harness.receiver.script("/down", Reply(status=500, body="<script>boom()</script>"))
    harness.receiver.script("/down", Reply(status=502, body="bad gateway"))
    created = await harness.create(target=harness.webhook("/down"), max_attempts=2)

    async def dead() -> bool:
        return await harness.schedule_status(created["id"]) == "failed"

    await harness.step_until(dead)
    html = (await harness.client.get(f"/ui/schedules/{created['id']}")).text
    log = html[html.index('<table class="attempt-log">') :]
    log = log[: log.index("</table>")]
    rows = re.findall(r"<tr>\s*<td>(\d+)</td>", log)
    assert rows == ["1", "2"]
    assert "status-retry" in log
    assert "status-dead_lettered" in log
    assert "<td>500</td>" in log
    assert "<td>502</td>" in log
    assert "<script>boom" not in html
    assert "&lt;script&gt;boom()&lt;/script&gt;" in log
    # A dead-lettered occurrence's attempts are open to read.
    assert "<details open>" in html


async def test_the_audit_events_name_the_key_that_pressed_the_button(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(api_keys=KEYS) as h:
        response = await h.client.post(
            "/v1/schedules", json=spec(h), headers={"Authorization": f"Bearer {WRITER}"}
        )
        page = f"/ui/schedules/{response.json()['id']}"
        token = token_of((await h.client.get(page, headers=basic(WRITER))).text)
        done = await post_form(h, f"{page}/pause", {"token": token}, basic(WRITER))
        assert done.status_code == 303
        html = (await h.client.get(page, headers=basic(WRITER))).text
        events = html[html.index('id="audit-events"') :]
        events = events[: events.index("</table>")]
        kinds = re.findall(r"<td>(created|paused)</td>\s*<td>(\d+)</td>\s*<td>([^<]*)</td>", events)
        assert kinds == [("created", "1", "ops"), ("paused", "2", "ops")]


async def test_a_schedule_that_paused_itself_says_so(harness: Harness) -> None:
    harness.receiver.always("/down", Reply(status=500))
    created = await harness.create(
        **spec(
            harness,
            target=harness.webhook("/down"),
            trigger={"type": "interval", "every_seconds": 1},
            max_attempts=1,
            pause_after_failures=2,
        )
    )

    async def paused() -> bool:
        return await harness.schedule_status(created["id"]) == "paused"

    await harness.step_until(paused, timeout=20)
    html = (await harness.client.get(f"/ui/schedules/{created['id']}")).text
    assert 'id="pause-reason">paused itself after 2 dead letters in a row<' in html
    assert "(pauses itself at 2)" in html
    assert f'action="/ui/schedules/{created["id"]}/resume"' in html


async def test_another_tenants_schedule_is_missing_from_the_console(harness: Harness) -> None:
    # The console acts in the default tenant: a schedule of another is not there, on its
    # page, in the list or by its buttons, as one that does not exist is not.
    await harness.client.put("/v1/tenants/acme", json={})
    theirs = await harness.client.post(
        "/v1/schedules", json=spec(harness, name="acme-report"), headers={"Chronoq-Tenant": "acme"}
    )
    assert theirs.status_code == 201, theirs.text
    ours = await harness.create(**spec(harness))
    page = f"/ui/schedules/{theirs.json()['id']}"

    assert (await harness.client.get(page)).status_code == 404
    listing = (await harness.client.get("/ui/schedules")).text
    assert ours["id"] in listing
    assert theirs.json()["id"] not in listing
    assert "acme-report" not in listing
    token = token_of((await harness.client.get(f"/ui/schedules/{ours['id']}")).text)
    response = await post_form(harness, f"{page}/pause", {"token": token})
    assert response.status_code == 404
    mine = await harness.client.get(theirs.headers["Location"], headers={"Chronoq-Tenant": "acme"})
    assert mine.json()["status"] == "pending"


async def test_the_backfill_form_fires_past_ticks_once_and_marks_each_refused_field(
    harness: Harness,
) -> None:
    start = datetime(2026, 1, 5, tzinfo=UTC)
    created = await harness.create(
        **spec(
            harness,
            trigger={"type": "interval", "every_seconds": 3600, "start_at": start.isoformat()},
        )
    )
    page = f"/ui/schedules/{created['id']}"
    html = (await harness.client.get(page)).text
    form = {"token": token_of(html), "version": str(created["version"])}

    refused = await post_form(
        harness, f"{page}/backfill", {**form, "from": "yesterday", "to": "2999-01-01T00:00:00Z"}
    )
    assert refused.status_code == 422
    errors = dict(re.findall(r'id="error-backfill-(\w+)">([^<]*)</span>', refused.text))
    assert set(errors) == {"from"}, errors
    assert 'name="to" value="2999-01-01T00:00:00Z"' in refused.text  # what was typed, kept
    future = await post_form(
        harness,
        f"{page}/backfill",
        {**form, "from": "2026-01-05T00:00:00Z", "to": "2999-01-01T00:00:00Z"},
    )
    assert future.status_code == 422
    assert re.findall(r'id="error-backfill-(\w+)">', future.text) == ["to"]
    before = await harness.get(f"/v1/schedules/{created['id']}/occurrences?limit=100")

    window = {"from": "2026-01-05T00:00:00Z", "to": "2026-01-05T02:00:00Z"}
    done = await post_form(harness, f"{page}/backfill", {**form, **window})
    assert done.status_code == 303, done.text
    assert done.headers["location"].endswith("?done=backfilled")
    after = await harness.get(f"/v1/schedules/{created['id']}/occurrences?limit=100")
    made = {o["fire_at"] for o in after["items"]} - {o["fire_at"] for o in before["items"]}
    assert made == {"2026-01-05T00:00:00Z", "2026-01-05T01:00:00Z", "2026-01-05T02:00:00Z"}
    # A second time creates nothing new (the version is unchanged by a backfill or not).
    current = await harness.get(f"/v1/schedules/{created['id']}")
    again = await post_form(
        harness, f"{page}/backfill", {**form, "version": str(current["version"]), **window}
    )
    assert again.status_code == 303
    assert len(
        (await harness.get(f"/v1/schedules/{created['id']}/occurrences?limit=100"))["items"]
    ) == len(after["items"])
