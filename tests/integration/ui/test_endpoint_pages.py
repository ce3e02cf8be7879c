"""Endpoints in the console: the list with each circuit's state; one endpoint's page with its
circuit, request (secrets redacted), secrets' hints, recent attempts and events; Rotate shows
the new secret on its answer's page only; Enable closes an open circuit."""

from __future__ import annotations

import html
from datetime import timedelta
from typing import Any

import pytest

from tests.conftest import STORES
from tests.integration.conftest import Harness
from tests.integration.ui.pages import post_form, token_of
from tests.receiver import Reply

pytestmark = pytest.mark.parametrize("database_url", STORES[:1], indirect=True)


async def _endpoint(harness: Harness, **body: Any) -> dict[str, Any]:
    made = await harness.client.post("/v1/endpoints", json=body)
    assert made.status_code == 201, made.text
    found: dict[str, Any] = made.json()
    return found


async def test_the_list_and_the_page_show_the_circuit_and_recent_attempts_without_secrets(
    harness: Harness,
) -> None:
    harness.receiver.always("/down", Reply(503, body="upstream is down"))
    made = await _endpoint(
        harness,
        name="billing",
        url=harness.receiver.url("/down"),
        headers={"Authorization": "Bearer s3cret-value"},
        circuit={"failure_threshold": 2, "cooldown_seconds": 60},
    )
    secret = made["signing_secrets"][0]["secret"]
    for _ in range(2):
        await harness.create(target={"type": "endpoint", "endpoint_id": made["id"]})
    await harness.step()

    listed = await harness.client.get("/ui/endpoints")
    assert listed.status_code == 200, listed.text
    assert "billing" in listed.text
    assert 'circuit-open">open' in listed.text
    page = await harness.client.get(f"/ui/endpoints/{made['id']}")
    assert page.status_code == 200, page.text
    text = html.unescape(page.text)
    assert 'id="failures">2<' in text
    assert "upstream is down" in text  # the attempts' error
    assert text.count("503") >= 2
    assert "s3cret-value" not in text
    assert secret not in text
    assert "Authorization: ***" in text
    assert made["signing_secrets"][0]["hint"] in text
    assert "opened" in text  # its events


async def test_rotate_shows_the_new_secret_once_and_enable_closes_the_circuit(
    harness: Harness,
) -> None:
    harness.receiver.always("/down", Reply(503))
    made = await _endpoint(
        harness, url=harness.receiver.url("/down"), circuit={"failure_threshold": 1}
    )
    await harness.create(target={"type": "endpoint", "endpoint_id": made["id"]})
    await harness.step()
    page = await harness.client.get(f"/ui/endpoints/{made['id']}")
    token = token_of(page.text)

    form = {"token": token, "version": str(made["version"])}
    rotated = await post_form(harness, f"/ui/endpoints/{made['id']}/rotate", form)
    assert rotated.status_code == 200, rotated.text
    # The same form sent again (a reload of that page) rotates nothing and shows no secret.
    again_posted = await post_form(harness, f"/ui/endpoints/{made['id']}/rotate", form)
    assert again_posted.status_code == 409, again_posted.text
    assert 'id="secret-value"' not in again_posted.text
    assert "nothing was rotated" in again_posted.text
    endpoint = await harness.get(f"/v1/endpoints/{made['id']}")
    newest = endpoint["signing_secrets"][-1]
    shown = html.unescape(rotated.text)
    assert 'id="secret-value">whsec_' in shown
    assert newest["hint"][-4:] in shown
    again = await harness.client.get(f"/ui/endpoints/{made['id']}")
    assert 'id="secret-value"' not in again.text
    assert len(endpoint["signing_secrets"]) == 2

    enabled = await post_form(
        harness, f"/ui/endpoints/{made['id']}/enable", {"token": token_of(again.text)}
    )
    assert enabled.status_code == 303, enabled.text
    assert (await harness.get(f"/v1/endpoints/{made['id']}"))["state"] == "closed"
    harness.receiver.always("/down", Reply(200))
    harness.database.clock.move(timedelta(seconds=5))
    await harness.step()
    after = await harness.get(f"/v1/endpoints/{made['id']}/attempts")
    assert after["items"][0]["status_code"] == 200
    forged = await post_form(
        harness, f"/ui/endpoints/{made['id']}/rotate", {"token": "x", "version": "3"}
    )
    assert forged.status_code == 403
    assert len((await harness.get(f"/v1/endpoints/{made['id']}"))["signing_secrets"]) == 2


async def test_the_topics_and_a_topics_subscriptions_are_listed(harness: Harness) -> None:
    made = await _endpoint(harness, name="billing-eu", url=harness.receiver.url("/eu"))
    assert (await harness.client.put("/v1/topics/billing", json={})).status_code == 201
    await harness.client.put("/v1/topics/quiet", json={"description": "Nothing yet"})
    subscribed = await harness.client.post(
        "/v1/subscriptions",
        json={
            "topic": "billing",
            "endpoint_id": made["id"],
            "event_types": ["invoice.*"],
            "match": {"region": ["eu", "uk"]},
        },
    )
    assert subscribed.status_code == 201, subscribed.text
    listed = await harness.client.get("/ui/topics")
    assert listed.status_code == 200, listed.text
    assert "billing" in listed.text
    assert "Nothing yet" in listed.text
    page = html.unescape((await harness.client.get("/ui/topics/billing")).text)
    assert subscribed.json()["id"] in page
    assert f"/ui/endpoints/{made['id']}" in page
    assert "invoice.*" in page
    assert "region = eu or uk" in page
    quiet = await harness.client.get("/ui/topics/quiet")
    assert "No subscriptions" in quiet.text
    missing = await harness.client.get("/ui/topics/nope")
    assert missing.status_code == 404
