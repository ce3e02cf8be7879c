"""The console's charts: the fleet's page and the chart on a schedule's, flow key's,
tenant's and endpoint's page, each with the figures GET /v1/activity answers, over the
window the address names; a window it does not know is refused naming it."""

from __future__ import annotations

import re
from typing import Any

import pytest

from app.worker.activity import ActivityRollup
from tests.conftest import STORES
from tests.integration.conftest import Harness
from tests.receiver import Reply

pytestmark = pytest.mark.parametrize("database_url", STORES[:1], indirect=True)


def _figures(html: str) -> dict[str, str]:
    return dict(re.findall(r'data-figure="([a-z_0-9]+)"[^>]*>([^<]*)<', html))


def _api_figures(found: dict[str, Any]) -> dict[str, str]:
    totals = found["totals"]
    return {name: str(totals[name]) for name in ("delivered", "failed", "dead_lettered")}


async def _activity(harness: Harness) -> tuple[dict[str, Any], dict[str, Any]]:
    harness.receiver.always("/gone", Reply(410))
    delivered = await harness.create(flow_key="acme")
    dead = await harness.create(target=harness.webhook("/gone"))
    assert await harness.step() == 2
    await ActivityRollup(harness.database, harness.settings).run_once()
    return delivered, dead


async def test_each_chart_shows_the_figures_the_api_answers(harness: Harness) -> None:
    delivered, dead = await _activity(harness)
    pages = {
        "/ui/activity": "/v1/activity",
        "/ui/activity?window=24h": "/v1/activity?window=24h",
        f"/ui/schedules/{dead['id']}": f"/v1/activity?schedule_id={dead['id']}",
        f"/ui/schedules/{delivered['id']}": f"/v1/activity?schedule_id={delivered['id']}",
        "/ui/flow-keys/acme": "/v1/activity?flow_key=acme",
        "/ui/tenants/default": "/v1/activity?tenant=default",
    }
    for page, api in pages.items():
        html = (await harness.client.get(page)).text
        shown = _figures(html)
        assert {k: shown[k] for k in ("delivered", "failed", "dead_lettered")} == _api_figures(
            await harness.get(api)
        ), page
        assert '<figure class="activity"' in html, page
    fleet = _figures((await harness.client.get("/ui/activity")).text)
    assert (fleet["delivered"], fleet["dead_lettered"]) == ("1", "1")


async def test_the_window_links_keep_the_page_and_a_bad_window_is_refused(
    harness: Harness,
) -> None:
    _, dead = await _activity(harness)
    html = (await harness.client.get(f"/ui/schedules/{dead['id']}?window=24h")).text
    windows = html[
        html.index('<nav class="windows"') : html.index(
            "</nav>", html.index('<nav class="windows"')
        )
    ]
    assert '<b aria-current="true">last day</b>' in windows
    assert 'href="?#activity"' in windows  # the last hour: the default, no parameter

    refused = await harness.client.get("/ui/activity?window=2h")
    assert refused.status_code == 422
    assert "window is one of 1h, 24h" in refused.text
    on_page = await harness.client.get(f"/ui/schedules/{dead['id']}?window=week")
    assert on_page.status_code == 422


async def test_an_endpoints_page_charts_its_attempts(harness: Harness) -> None:
    made = await harness.client.post(
        "/v1/endpoints", json={"url": harness.receiver.url("/endpoint")}
    )
    assert made.status_code == 201, made.text
    endpoint = made.json()["id"]
    await harness.create(target={"type": "endpoint", "endpoint_id": endpoint})
    await harness.create()  # another target: not the endpoint's
    assert await harness.step() == 2
    await ActivityRollup(harness.database, harness.settings).run_once()

    shown = _figures((await harness.client.get(f"/ui/endpoints/{endpoint}")).text)

    assert (shown["delivered"], shown["failed"]) == ("1", "0")
    api = await harness.get(f"/v1/activity?endpoint_id={endpoint}")
    assert api["totals"]["delivered"] == 1
