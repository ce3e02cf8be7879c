"""The console's edit form beyond the URL, attempts, key and labels: the payload, trigger,
retry policy and failure callback as JSON and the headers as lines, each saved as the PATCH
the API would take, a secret header kept when sent back as ***, emptied fields meaning none,
and each refused field beside its input with nothing saved."""

from __future__ import annotations

import html
import json
import re
import uuid
from typing import Any

import pytest
import sqlalchemy as sa

from app.store.schema.tables import schedules
from tests.conftest import STORES
from tests.integration.conftest import Harness
from tests.integration.ui.pages import post_form, spec, token_of

pytestmark = pytest.mark.parametrize("database_url", STORES[:1], indirect=True)


def _shown(page: str, name: str) -> str:
    """A field's value as the form shows it."""
    found = re.search(rf'name="{name}"[^>]*>([^<]*)</textarea>', page)
    assert found is not None, name
    return html.unescape(found.group(1))


def _value(page: str, name: str) -> str:
    """An input's value as the form shows it."""
    found = re.search(rf'name="{name}" value="([^"]*)"', page)
    assert found is not None, name
    return html.unescape(found.group(1))


async def _form(harness: Harness, schedule_id: str) -> tuple[str, dict[str, str]]:
    page = (await harness.client.get(f"/ui/schedules/{schedule_id}")).text
    fields = {
        "token": token_of(page),
        **{name: _value(page, name) for name in ("version", "max_attempts", "target_url")},
        **{
            name: _shown(page, name)
            for name in ("labels", "headers", "payload", "trigger", "retry", "on_failure")
        },
    }
    return page, fields


async def test_payload_trigger_retry_callback_and_headers_are_saved_as_a_patch(
    harness: Harness,
) -> None:
    target = harness.webhook(headers={"X-Api-Key": "sekrit-header-value", "X-Team": "blue"})
    created = await harness.create(**spec(harness, target=target, payload={"n": 1}))
    page, form = await _form(harness, created["id"])
    assert "sekrit" not in page
    assert form["headers"] == "X-Api-Key: ***\nX-Team: blue"
    assert json.loads(form["trigger"])["expression"] == "*/5 * * * *"
    assert form["retry"] == form["on_failure"] == ""

    callback = {"type": "webhook", "url": harness.receiver.url("/failed")}
    edited = {
        **form,
        "payload": '{"n": 2, "items": ["a"]}',
        "trigger": '{"type": "interval", "every_seconds": 120}',
        "retry": '{"base_delay_seconds": 2, "max_delay_seconds": 60}',
        "on_failure": json.dumps(callback),
        "headers": "X-Api-Key: ***\nX-Team: red",
    }
    done = await post_form(harness, f"/ui/schedules/{created['id']}/edit", edited)

    assert done.status_code == 303, done.text
    after = await harness.get(f"/v1/schedules/{created['id']}")
    assert after["payload"] == {"n": 2, "items": ["a"]}
    assert after["trigger"]["type"] == "interval"
    assert after["trigger"]["every_seconds"] == 120
    assert after["retry"]["base_delay_seconds"] == 2
    assert after["on_failure"]["url"] == callback["url"]
    assert after["target"]["headers"] == {"X-Api-Key": "***", "X-Team": "red"}
    async with harness.database.engine.connect() as conn:
        stored = (
            await conn.execute(
                sa.select(schedules.c.target).where(schedules.c.id == uuid.UUID(after["id"]))
            )
        ).scalar_one()
    assert "sekrit-header-value" in str(stored)  # the secret sent back as *** was kept
    events = (await harness.get(f"/v1/schedules/{created['id']}/events"))["items"]
    assert set(events[-1]["fields"]) == {"payload", "trigger", "retry", "on_failure", "target"}

    # Emptied: no retry policy of its own, no callback; the same form again changes nothing.
    _, form = await _form(harness, created["id"])
    emptied = {**form, "retry": "", "on_failure": ""}
    done = await post_form(harness, f"/ui/schedules/{created['id']}/edit", emptied)
    assert done.status_code == 303, done.text
    after = await harness.get(f"/v1/schedules/{created['id']}")
    assert (after["retry"], after["on_failure"]) == (None, None)
    _, form = await _form(harness, created["id"])
    same = await post_form(harness, f"/ui/schedules/{created['id']}/edit", form)
    assert same.headers["location"].endswith("done=unchanged")


async def test_each_refused_field_is_beside_its_input_and_nothing_is_saved(
    harness: Harness,
) -> None:
    created = await harness.create(**spec(harness))
    _, form = await _form(harness, created["id"])
    before = await harness.get(f"/v1/schedules/{created['id']}")
    cases: dict[str, dict[str, Any]] = {
        "payload": {"payload": "{nope"},
        "trigger": {"trigger": '{"type": "cron", "expression": "61 * * * *"}'},
        "retry": {"retry": '{"base_delay_seconds": -1}'},
        "on_failure": {"on_failure": '{"type": "webhook", "url": "ftp://x"}'},
        "headers": {"headers": "no colon"},
    }
    for named, fields in cases.items():
        refused = await post_form(
            harness, f"/ui/schedules/{created['id']}/edit", {**form, **fields}
        )
        assert refused.status_code == 422, (named, refused.text)
        errors = re.findall(r'<span class="field-error" id="error-(\w+)">', refused.text)
        assert errors == [named], (named, errors)
    emptied = await post_form(
        harness, f"/ui/schedules/{created['id']}/edit", {**form, "trigger": ""}
    )
    assert re.findall(r'id="error-(\w+)">', emptied.text) == ["trigger"]
    together = await post_form(
        harness,
        f"/ui/schedules/{created['id']}/edit",
        {**form, **cases["payload"], **cases["headers"], **cases["trigger"]},
    )
    errors = re.findall(r'<span class="field-error" id="error-(\w+)">', together.text)
    assert set(errors) == {"payload", "headers", "trigger"}
    assert await harness.get(f"/v1/schedules/{created['id']}") == before
