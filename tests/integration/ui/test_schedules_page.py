"""The console's schedules list: what it shows, its filters and its pages."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.conftest import STORES
from tests.integration.conftest import Harness

# The console adds no statement of its own: it calls what the API's lists call, which the
# API and store suites run on every store.
pytestmark = pytest.mark.parametrize("database_url", STORES[:1], indirect=True)


def later(harness: Harness, **extra: Any) -> dict[str, Any]:
    return {
        "event_type": "report.due",
        "payload": {"n": 1},
        "target": harness.webhook(),
        "trigger": {"type": "once", "delay_seconds": 3600},
        **extra,
    }


def rows(html: str) -> list[str]:
    """The schedule ids the page's table links to, in its order."""
    return re.findall(r'href="/ui/schedules/([0-9a-f-]{36})"', html)


async def test_the_list_shows_schedules_newest_first(harness: Harness) -> None:
    first = await harness.create(**later(harness, name="first"))
    second = await harness.create(**later(harness, name="second"))
    response = await harness.client.get("/ui/schedules")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert rows(response.text) == [second["id"], first["id"]]
    assert "report.due" in response.text


async def test_ui_is_the_schedules_list(harness: Harness) -> None:
    created = await harness.create(**later(harness))
    response = await harness.client.get("/ui")
    assert response.status_code == 200
    assert rows(response.text) == [created["id"]]


async def test_a_script_in_a_name_or_label_shows_as_text(harness: Harness) -> None:
    await harness.create(
        **later(harness, name="<script>alert(1)</script>", labels={"team": "<b>x</b>"})
    )
    html = (await harness.client.get("/ui/schedules")).text
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;b&gt;x&lt;/b&gt;" in html


async def test_the_filters_narrow_the_list_as_the_api_does(harness: Harness) -> None:
    kept = await harness.create(**later(harness, event_type="a.b", labels={"team": "blue"}))
    await harness.create(**later(harness, event_type="a.b", labels={"team": "red"}))
    await harness.create(**later(harness, event_type="other"))
    paused = await harness.create(**later(harness, event_type="other"))
    await harness.client.post(f"/v1/schedules/{paused['id']}/pause")

    by_label = await harness.client.get(
        "/ui/schedules", params={"event_type": "a.b", "label": "team:blue", "status": ""}
    )
    assert rows(by_label.text) == [kept["id"]]
    by_status = await harness.client.get("/ui/schedules", params={"status": "paused"})
    assert rows(by_status.text) == [paused["id"]]
    # The form shows the filters it was sent with.
    assert 'value="team:blue"' in by_label.text
    assert '<option value="paused" selected>' in by_status.text


async def test_a_filter_the_api_would_refuse_is_named_on_the_page(harness: Harness) -> None:
    response = await harness.client.get("/ui/schedules", params={"label": "no-colon"})
    assert response.status_code == 422
    assert "key:value" in response.text
    bad_status = await harness.client.get("/ui/schedules", params={"status": "sleeping"})
    assert bad_status.status_code == 422
    assert "sleeping" in bad_status.text


async def test_the_next_page_link_carries_the_cursor_and_the_filters(harness: Harness) -> None:
    specs = [later(harness, labels={"batch": "yes"}) for _ in range(53)]
    response = await harness.client.post("/v1/schedules/batch", json={"items": specs})
    assert response.status_code == 201, response.text
    ids = sorted((item["id"] for item in response.json()["items"]), reverse=True)

    first = await harness.client.get("/ui/schedules", params={"label": "batch:yes"})
    assert rows(first.text) == ids[:50]
    link = re.search(r'<a rel="next" href="([^"]+)"', first.text)
    assert link is not None
    href = link.group(1).replace("&amp;", "&")
    assert "label=batch%3Ayes" in href
    assert "cursor=" in href
    assert "offset" not in href

    second = await harness.client.get(href)
    assert rows(second.text) == ids[50:]
    assert 'rel="next"' not in second.text
    assert "First page" in second.text


async def test_a_cursor_the_api_did_not_issue_is_refused_on_the_page(harness: Harness) -> None:
    response = await harness.client.get("/ui/schedules", params={"cursor": "bogus"})
    assert response.status_code == 422
    assert "cursor" in response.text


async def test_the_console_is_not_in_the_openapi_document(harness: Harness) -> None:
    document = (await harness.client.get("/openapi.json")).json()
    assert not [path for path in document["paths"] if path.startswith("/ui")]
