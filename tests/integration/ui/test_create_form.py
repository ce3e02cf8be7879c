"""The console's create form: a schedule of each trigger type made as POST /v1/schedules
makes it; the next fire times of the trigger typed, with the form's button and alone for its
script; every refused field beside its input with nothing stored; a read key gets no form."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.conftest import STORES
from tests.integration.conftest import Harness
from tests.integration.ui.pages import KEYS, READER, WRITER, basic, post_form, token_of

pytestmark = pytest.mark.parametrize("database_url", STORES[:1], indirect=True)


async def _token(harness: Harness) -> str:
    page = await harness.client.get("/ui/schedules/new")
    assert page.status_code == 200, page.text
    assert 'id="form-error"' not in page.text  # a blank form refuses nothing
    assert 'class="field-error"' not in page.text
    return token_of(page.text)


def _fields(harness: Harness, **extra: str) -> dict[str, str]:
    return {
        "event_type": "invoice.due",
        "target_kind": "webhook",
        "target_url": harness.receiver.url("/made"),
        "trigger_type": "cron",
        "expression": "0 9 * * 1-5",
        "timezone": "Europe/Paris",
        "payload": '{"invoice": 42}',
        **extra,
    }


async def _schedules(harness: Harness) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = (await harness.get("/v1/schedules"))["items"]
    return items


async def test_each_trigger_type_makes_the_schedule_the_api_would(harness: Harness) -> None:
    token = await _token(harness)
    cases = {
        "cron": {},
        "interval": {"trigger_type": "interval", "every_seconds": "90"},
        "once": {"trigger_type": "once", "at": "2030-01-02T03:04:05Z"},
        "delay": {"trigger_type": "once", "delay_seconds": "3600"},
        "immediate": {"trigger_type": "immediate"},
    }
    for name, extra in cases.items():
        fields = _fields(harness, name=f"made-{name}", token=token, labels="team:billing", **extra)
        answer = await post_form(harness, "/ui/schedules/new", fields)
        assert answer.status_code == 303, (name, answer.text)
        made_id = answer.headers["location"].split("/ui/schedules/")[1].split("?")[0]
        made = await harness.get(f"/v1/schedules/{made_id}")
        assert made["name"] == f"made-{name}"
        assert made["payload"] == {"invoice": 42}
        assert made["labels"] == {"team": "billing"}
        assert made["trigger"]["type"] == (extra.get("trigger_type") or "cron")
    made = {s["name"]: s for s in await _schedules(harness)}
    assert made["made-cron"]["trigger"]["timezone"] == "Europe/Paris"
    assert made["made-interval"]["trigger"]["every_seconds"] == 90
    assert made["made-once"]["next_fire_at"].startswith("2030-01-02T03:04:05")
    page = await harness.client.get(f"/ui/schedules/{made['made-cron']['id']}?done=created")
    assert "Created." in page.text


async def test_every_refused_field_is_beside_its_input_and_nothing_is_stored(
    harness: Harness,
) -> None:
    token = await _token(harness)
    fields = _fields(
        harness,
        token=token,
        event_type="",
        expression="61 * * * *",
        payload="{not json",
        max_attempts="many",
        labels="no colon here",
        headers="X-Trace",
    )

    answer = await post_form(harness, "/ui/schedules/new", fields)

    assert answer.status_code == 422
    refused = dict(re.findall(r'id="error-([a-z_]+)">([^<]+)<', answer.text))
    assert set(refused) == {"payload", "max_attempts", "labels", "headers"}
    assert "not JSON" in refused["payload"]
    assert 'value="61 * * * *"' in answer.text  # what was typed is kept
    assert await _schedules(harness) == []
    # Once the form reads, the API's model refuses the rest, each beside its input.
    fixed = {**fields, "payload": "{}", "max_attempts": "3", "labels": "", "headers": ""}
    answer = await post_form(harness, "/ui/schedules/new", fixed)
    assert answer.status_code == 422
    refused = dict(re.findall(r'id="error-([a-z_]+)">([^<]+)<', answer.text))
    assert set(refused) == {"event_type", "expression"}, refused
    assert await _schedules(harness) == []
    bad_url = {**fixed, "event_type": "x.y", "expression": "0 9 * * *", "target_url": "ftp://x"}
    answer = await post_form(harness, "/ui/schedules/new", bad_url)
    assert answer.status_code == 422
    assert 'id="error-target_url"' in answer.text
    assert await _schedules(harness) == []


async def test_the_preview_shows_the_next_fire_times_of_the_trigger_typed(
    harness: Harness,
) -> None:
    token = await _token(harness)
    fields = _fields(harness, token=token, preview="1", expression="0 12 * * *", timezone="UTC")

    answer = await post_form(harness, "/ui/schedules/new", fields)

    assert answer.status_code == 200
    times = re.findall(
        r'<time datetime="([^"]+)"', answer.text[answer.text.index('id="preview"') :]
    )
    assert len(times) == 5
    assert all("T12:00:00" in t for t in times)
    assert await _schedules(harness) == []  # a preview stores nothing
    alone = await harness.client.get(
        "/ui/schedules/new/preview", params={"trigger_type": "interval", "every_seconds": "60"}
    )
    assert alone.status_code == 200
    assert alone.text.startswith('<ol class="upcoming" id="preview-times">')
    refused = await harness.client.get(
        "/ui/schedules/new/preview", params={"trigger_type": "cron", "expression": "nope"}
    )
    assert 'id="preview-error"' in refused.text


async def test_a_read_key_gets_no_form_and_its_post_is_refused(make_harness: Any) -> None:
    async with make_harness(api_keys=KEYS) as keyed:
        page = await keyed.client.get("/ui/schedules/new", headers=basic(READER))
        assert page.status_code == 403
        listed = await keyed.client.get("/ui/schedules", headers=basic(READER))
        assert 'id="new-schedule"' not in listed.text
        writer = await keyed.client.get("/ui/schedules", headers=basic(WRITER))
        assert 'id="new-schedule"' in writer.text
        posted = await post_form(keyed, "/ui/schedules/new", _fields(keyed), headers=basic(READER))
        assert posted.status_code == 403
        assert (await keyed.client.get("/v1/schedules", headers=basic(WRITER))).json()[
            "items"
        ] == []
