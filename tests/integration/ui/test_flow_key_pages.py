"""Flow keys in the console: the list with limits and live figures, one key's page, its
Pause/Resume button and the form that edits its limits under the version shown."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import STORES
from tests.integration.api.test_flow_keys import backed_off
from tests.integration.conftest import Harness
from tests.integration.ui.pages import KEYS, READER, WRITER, basic, post_form, token_of

pytestmark = pytest.mark.parametrize("database_url", STORES[:1], indirect=True)

HOURLY = {"type": "interval", "every_seconds": 3600}
NONE = "\N{EN DASH}"  # how a page shows no limit
FORM = {"rate": "", "period_seconds": "1", "burst": "", "parallelism": "", "ordering": "none"}


def row_of(html: str, key: str) -> str:
    """The list's row of `key`, its cells' text joined by |."""
    found = re.search(rf'<tr>\s*<td><a href="/ui/flow-keys/{re.escape(key)}">.*?</tr>', html, re.S)
    assert found is not None, f"no row for {key}"
    cells = re.findall(r"<td>(.*?)</td>", found.group(0), re.S)
    return "|".join(re.sub(r"<[^>]+>", "", cell).strip() for cell in cells)


def form_value(html: str, name: str) -> str:
    found = re.search(rf'name="{name}" value="([^"]*)"', html)
    assert found is not None, f"the form has no {name}"
    return found.group(1)


async def limits_of(harness: Harness, key: str) -> dict[str, Any]:
    return await harness.get(f"/v1/flow-keys/{key}")


async def test_the_list_shows_a_key_put_and_a_key_only_a_schedule_names(
    harness: Harness,
) -> None:
    put = await harness.client.put(
        "/v1/flow-keys/customer-42",
        json={"rate": 50, "period_seconds": 60, "burst": 80, "parallelism": 4},
    )
    assert put.status_code == 201, put.text
    await harness.client.put("/v1/flow-keys/ordered", json={"ordering": "fifo", "paused": True})
    await harness.create(flow_key="named.only:1", trigger=HOURLY)

    response = await harness.client.get("/ui/flow-keys")
    assert response.status_code == 200
    html = response.text
    assert '<a href="/ui/flow-keys">Flow keys</a>' in html  # the header's nav link
    assert row_of(html, "customer-42") == "customer-42|50 per 1 min|80|4|none|no|0|0|-"
    assert row_of(html, "ordered") == f"ordered|{NONE}|{NONE}|{NONE}|fifo|paused|0|0|-"
    # Never put: no limits, and its live figures (its first tick is due and not started).
    assert row_of(html, "named.only:1") == "|".join(
        ["named.only:1 no limits", NONE, NONE, NONE, "none", "no", "0", "1", "-"]
    )
    keys = re.findall(r'<td><a href="/ui/flow-keys/([^"]+)">', html)
    assert keys == ["customer-42", "named.only:1", "ordered"]


async def test_the_list_pages_like_the_other_lists(harness: Harness) -> None:
    for n in range(51):
        response = await harness.client.put(f"/v1/flow-keys/k{n:02d}", json={})
        assert response.status_code == 201, response.text

    first = (await harness.client.get("/ui/flow-keys")).text
    assert len(re.findall(r'<td><a href="/ui/flow-keys/', first)) == 50
    link = re.search(r'<a rel="next" href="([^"]+)"', first)
    assert link is not None
    second = (await harness.client.get(link.group(1).replace("&amp;", "&"))).text
    assert re.findall(r'<td><a href="/ui/flow-keys/([^"]+)">', second) == ["k50"]
    assert 'rel="next"' not in second
    assert "First page" in second

    tampered = await harness.client.get("/ui/flow-keys?cursor=not-a-cursor")
    assert tampered.status_code == 422
    assert "cursor is not one this API issued" in tampered.text


async def test_pause_then_resume_flips_the_key_and_the_claim_holds_its_schedule(
    harness: Harness,
) -> None:
    await harness.client.put("/v1/flow-keys/tenant-7", json={"rate": 10, "parallelism": 2})
    page = "/ui/flow-keys/tenant-7"
    html = (await harness.client.get(page)).text
    assert f'action="{page}/pause"' in html
    assert f'action="{page}/resume"' not in html

    paused = await post_form(harness, f"{page}/pause", {"token": token_of(html)})
    assert paused.status_code == 303
    assert paused.headers["location"] == f"{page}?done=paused"
    key = await limits_of(harness, "tenant-7")
    # Only `paused` changed: the rest of the limits are kept.
    assert (key["paused"], key["rate"], key["parallelism"], key["version"]) == (True, 10, 2, 2)
    shown = (await harness.client.get(paused.headers["location"])).text
    assert 'id="state">paused<' in shown
    assert "Paused: nothing of the key starts" in shown
    assert f'action="{page}/resume"' in shown

    # The claim respects it: nothing of the key starts; an unkeyed schedule does.
    held = await harness.create(flow_key="tenant-7")
    free = await harness.create()
    assert await harness.step() == 1
    assert await harness.schedule_status(free["id"]) == "completed"
    assert await harness.schedule_status(held["id"]) == "pending"
    assert '<dd id="waiting">1</dd>' in (await harness.client.get(page)).text

    resumed = await post_form(harness, f"{page}/resume", {"token": token_of(shown)})
    assert resumed.status_code == 303
    assert resumed.headers["location"] == f"{page}?done=resumed"
    assert (await limits_of(harness, "tenant-7"))["paused"] is False
    assert await harness.step() == 1
    assert await harness.schedule_status(held["id"]) == "completed"
    assert 'id="state">running<' in (await harness.client.get(page)).text


async def test_pausing_a_key_never_put_gives_it_limits_of_a_pause_alone(
    harness: Harness,
) -> None:
    await harness.create(flow_key="fresh-key", trigger=HOURLY)
    page = "/ui/flow-keys/fresh-key"
    html = (await harness.client.get(page)).text
    assert 'id="state">no limits<' in html
    assert form_value(html, "version") == "0"
    response = await post_form(harness, f"{page}/pause", {"token": token_of(html)})
    assert response.status_code == 303
    key = await limits_of(harness, "fresh-key")
    assert (key["paused"], key["rate"], key["parallelism"], key["version"]) == (True, None, None, 1)


async def test_the_form_puts_the_whole_limits_under_the_version_shown(harness: Harness) -> None:
    await harness.client.put("/v1/flow-keys/acme", json={"rate": 5, "paused": True})
    page = "/ui/flow-keys/acme"
    html = (await harness.client.get(page)).text
    assert form_value(html, "rate") == "5"
    assert form_value(html, "period_seconds") == "1"
    assert form_value(html, "version") == "1"
    assert 'name="paused" value="true" checked' in html

    fields = {
        "token": token_of(html),
        "version": "1",
        **FORM,
        "rate": "120",
        "period_seconds": "0.5",
        "burst": "200",
        "parallelism": "1",
        "ordering": "fifo",
    }
    response = await post_form(harness, f"{page}/limits", fields)
    assert response.status_code == 303
    assert response.headers["location"] == f"{page}?done=saved"
    key = await limits_of(harness, "acme")
    shown = {k: key[k] for k in ("rate", "period_seconds", "burst", "parallelism", "ordering")}
    assert shown == {
        "rate": 120,
        "period_seconds": 0.5,
        "burst": 200,
        "parallelism": 1,
        "ordering": "fifo",
    }
    # The box left unticked is a resume: the form is the whole limits.
    assert (key["paused"], key["version"]) == (False, 2)
    after = (await harness.client.get(response.headers["location"])).text
    assert "Limits saved." in after
    assert form_value(after, "period_seconds") == "0.5"
    assert form_value(after, "version") == "2"


async def test_an_edit_from_a_stale_page_is_refused_and_shows_the_current_values(
    harness: Harness,
) -> None:
    await harness.client.put("/v1/flow-keys/acme", json={"rate": 5})
    page = "/ui/flow-keys/acme"
    stale = (await harness.client.get(page)).text
    # Someone else changes the key meanwhile.
    changed = await harness.client.put(
        "/v1/flow-keys/acme", json={"rate": 7, "parallelism": 3}, headers={"If-Match": '"1"'}
    )
    assert changed.status_code == 200, changed.text

    fields = {"token": token_of(stale), "version": "1", **FORM, "rate": "99"}
    response = await post_form(harness, f"{page}/limits", fields)
    assert response.status_code == 409
    assert "changed since the page was loaded" in response.text
    assert form_value(response.text, "rate") == "7"
    assert form_value(response.text, "parallelism") == "3"
    assert form_value(response.text, "version") == "2"
    key = await limits_of(harness, "acme")
    assert (key["rate"], key["parallelism"], key["version"]) == (7, 3, 2)

    # A key never put, put by someone else before the form was sent: refused alike.
    await harness.create(flow_key="late", trigger=HOURLY)
    blank = (await harness.client.get("/ui/flow-keys/late")).text
    await harness.client.put("/v1/flow-keys/late", json={"parallelism": 9})
    fields = {"token": token_of(blank), "version": "0", **FORM, "rate": "1"}
    refused = await post_form(harness, "/ui/flow-keys/late/limits", fields)
    assert refused.status_code == 409
    assert (await limits_of(harness, "late"))["parallelism"] == 9


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"parallelism": "0"}, "parallelism", "parallelism: must be from 1 to 100000"),
        (
            {"ordering": "fifo", "parallelism": "2"},
            "parallelism",
            "parallelism: fifo means parallelism 1",
        ),
        ({"rate": "ten"}, "rate", "rate: must be a positive whole number"),
        ({"burst": "-3"}, "burst", "burst: must be a positive whole number"),
        ({"burst": "4"}, "burst", "burst: a burst needs a rate"),
        ({"period_seconds": "nan"}, "period_seconds", "period_seconds: must be a number"),
        ({"period_seconds": "0"}, "period_seconds", "period_seconds: must be more than 0"),
        ({"ordering": "lifo"}, "ordering", "ordering: is none or fifo"),
    ],
    ids=[
        "parallelism-0",
        "fifo-2",
        "rate-text",
        "burst-negative",
        "burst-alone",
        "period-nan",
        "period-0",
        "lifo",
    ],
)
async def test_invalid_input_names_the_field_keeps_what_was_typed_and_stores_nothing(
    harness: Harness, change: dict[str, str], field: str, message: str
) -> None:
    await harness.client.put("/v1/flow-keys/acme", json={"parallelism": 5})
    page = "/ui/flow-keys/acme"
    html = (await harness.client.get(page)).text
    fields = {"token": token_of(html), "version": "1", **FORM, "parallelism": "5", **change}
    response = await post_form(harness, f"{page}/limits", fields)
    assert response.status_code == 422
    assert message in response.text
    assert re.search(rf'name="{field}"[^>]*aria-invalid="true"', response.text)
    for name, typed in change.items():
        if name != "ordering":
            assert form_value(response.text, name) == typed
    key = await limits_of(harness, "acme")
    assert (key["parallelism"], key["rate"], key["ordering"], key["version"]) == (
        5,
        None,
        "none",
        1,
    )


async def test_a_form_without_a_version_or_a_token_changes_nothing(harness: Harness) -> None:
    await harness.client.put("/v1/flow-keys/acme", json={"parallelism": 5})
    page = "/ui/flow-keys/acme"
    token = token_of((await harness.client.get(page)).text)
    missing = await post_form(harness, f"{page}/limits", {"token": token, **FORM})
    assert missing.status_code == 422
    assert "reload the page" in missing.text
    for path in (f"{page}/limits", f"{page}/pause"):
        forged = await post_form(harness, path, {"version": "1", **FORM})
        assert forged.status_code == 403
    key = await limits_of(harness, "acme")
    assert (key["parallelism"], key["paused"], key["version"]) == (5, False, 1)


async def test_a_key_name_outside_the_alphabet_is_a_404_page_showing_it_as_text(
    harness: Harness,
) -> None:
    response = await harness.client.get("/ui/flow-keys/<script>x")
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("text/html")
    assert "<script>x" not in response.text
    assert "&lt;script&gt;x" in response.text


async def test_a_read_key_sees_no_buttons_or_form_and_its_post_is_refused(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(api_keys=KEYS) as h:
        writer = {"Authorization": f"Bearer {WRITER}"}
        put = await h.client.put("/v1/flow-keys/acme", json={"rate": 3}, headers=writer)
        assert put.status_code == 201, put.text
        page = "/ui/flow-keys/acme"
        for path in ("/ui/flow-keys", page):
            html = (await h.client.get(path, headers=basic(READER))).text
            assert "acme" in html
            assert 'method="post"' not in html
            assert 'name="token"' not in html
            # The header's tenant switcher only reads; the page itself has no button.
            assert "<button" not in html.partition("<main>")[2]
            assert "(read)" in html
        written = (await h.client.get(page, headers=basic(WRITER))).text
        assert f'action="{page}/pause"' in written
        assert 'id="limits-form"' in written

        token = token_of(written)
        fields = {"token": token, "version": "1", **FORM, "rate": "100"}
        for path, sent in ((f"{page}/pause", {"token": token}), (f"{page}/limits", fields)):
            refused = await post_form(h, path, sent, basic(READER))
            assert refused.status_code == 403
        reader = {"Authorization": f"Bearer {READER}"}
        key = (await h.client.get("/v1/flow-keys/acme", headers=reader)).json()
        assert (key["rate"], key["paused"], key["version"]) == (3, False, 1)


async def test_clear_backoff_ends_a_destinations_back_off_and_keeps_the_limits(
    harness: Harness,
) -> None:
    await harness.client.put("/v1/flow-keys/busy", json={"parallelism": 2})
    page = "/ui/flow-keys/busy"
    assert f'action="{page}/clear-backoff"' not in (await harness.client.get(page)).text
    await backed_off(harness, "busy")
    html = (await harness.client.get(page)).text
    assert f'action="{page}/clear-backoff"' in html

    cleared = await post_form(harness, f"{page}/clear-backoff", {"token": token_of(html)})
    assert cleared.status_code == 303
    assert cleared.headers["location"] == f"{page}?done=cleared"
    key = await limits_of(harness, "busy")
    assert (key["backoff_until"], key["parallelism"], key["version"]) == (None, 2, 1)
    shown = (await harness.client.get(cleared.headers["location"])).text
    assert "Back-off cleared" in shown
    assert f'action="{page}/clear-backoff"' not in shown
    assert await harness.step() == 1  # what waited on the key goes out now


async def test_clear_backoff_needs_the_forms_token(harness: Harness) -> None:
    await backed_off(harness, "busy")
    refused = await post_form(harness, "/ui/flow-keys/busy/clear-backoff", {"token": "forged"})
    assert refused.status_code == 403
    assert (await limits_of(harness, "busy"))["backoff_until"] is not None


async def test_a_schedules_page_links_its_key_whose_page_lists_its_schedules_and_waiting(
    harness: Harness,
) -> None:
    await harness.client.put("/v1/flow-keys/customer-42", json={"paused": True})
    keyed = [
        await harness.create(flow_key="customer-42", name=f"invoice-{n}", trigger=HOURLY)
        for n in range(2)
    ]
    other = await harness.create(flow_key="customer-43", name="elsewhere", trigger=HOURLY)

    page = (await harness.client.get(f"/ui/schedules/{keyed[0]['id']}")).text
    assert '<dd id="flow-key"><a href="/ui/flow-keys/customer-42">customer-42</a></dd>' in page

    html = (await harness.client.get("/ui/flow-keys/customer-42")).text
    schedules = re.search(r'<table class="list" id="schedules">.*?</table>', html, re.S)
    assert schedules is not None
    assert re.findall(r">(invoice-\d|elsewhere)</a>", schedules.group(0)) == [
        "invoice-1",
        "invoice-0",
    ]
    waiting = re.search(r'<table class="list" id="waiting-occurrences">.*?</table>', html, re.S)
    assert waiting is not None
    shown = set(re.findall(r'<td class="id">([0-9a-f-]{36})</td>', waiting.group(0)))
    assert shown == {s["next_occurrence_id"] for s in keyed}
    assert other["next_occurrence_id"] not in html


async def test_the_schedules_list_filters_by_flow_key_and_refuses_one_that_is_no_key(
    harness: Harness,
) -> None:
    await harness.create(flow_key="customer-42", name="mine", trigger=HOURLY)
    await harness.create(flow_key="customer-43", name="theirs", trigger=HOURLY)

    html = (await harness.client.get("/ui/schedules?flow_key=customer-42")).text
    assert re.findall(r">(mine|theirs)</a>", html) == ["mine"]
    assert 'name="flow_key" value="customer-42"' in html

    refused = await harness.client.get("/ui/schedules", params={"flow_key": "no key"})
    assert refused.status_code == 422
    assert "flow_key" in refused.text or "flow key" in refused.text
    assert re.findall(r">(mine|theirs)</a>", refused.text) == []


async def test_the_edit_form_moves_a_schedule_to_another_key_and_refuses_one_that_is_none(
    harness: Harness,
) -> None:
    created = await harness.create(flow_key="customer-42", name="moving", trigger=HOURLY)
    page = f"/ui/schedules/{created['id']}"
    html = (await harness.client.get(page)).text
    assert 'name="flow_key" value="customer-42"' in html
    form = {
        "token": token_of(html),
        "version": str(created["version"]),
        "target_url": created["target"]["url"],
        "max_attempts": str(created["max_attempts"]),
        "labels": "",
    }

    # A form from before it had the field (no flow_key posted) leaves the key as it is.
    kept = await post_form(harness, f"{page}/edit", form)
    assert kept.headers["location"].endswith("?done=unchanged")
    assert (await harness.get(page.replace("/ui", "/v1")))["flow_key"] == "customer-42"

    refused = await post_form(harness, f"{page}/edit", {**form, "flow_key": "no key"})
    assert refused.status_code == 422
    errors = dict(re.findall(r'id="error-(\w+)">([^<]*)</span>', refused.text))
    assert errors == {"flow_key": "a flow key is 1-128 of A-Z a-z 0-9 . _ : -"}
    assert (await harness.get(page.replace("/ui", "/v1")))["flow_key"] == "customer-42"

    moved = await post_form(harness, f"{page}/edit", {**form, "flow_key": "customer-43"})
    assert moved.status_code == 303, moved.text
    after = await harness.get(page.replace("/ui", "/v1"))
    assert after["flow_key"] == "customer-43"
    waiting = await harness.get("/v1/flow-keys/customer-43/occurrences")
    assert [o["occurrence_id"] for o in waiting["items"]] == [created["next_occurrence_id"]]

    cleared = await post_form(
        harness, f"{page}/edit", {**form, "version": str(after["version"]), "flow_key": ""}
    )
    assert cleared.status_code == 303, cleared.text
    assert (await harness.get(page.replace("/ui", "/v1")))["flow_key"] is None
