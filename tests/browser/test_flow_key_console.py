"""The console's flow key pages in a browser: from the header's link to the list, one key
paused from its page, and its limits edited, a refused value named beside the form."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from playwright.async_api import Page, expect

from tests.browser.live import LiveApp, PageLog
from tests.receiver import Receiver

WRITER = "0123456789abcdef-console-writer"
KEYS = f"ops:{WRITER}"
VIEWPORT = {"width": 1280, "height": 800}

NewPage = Callable[..., Awaitable[Page]]


def login(key: str) -> dict[str, Any]:
    return {"http_credentials": {"username": "operator", "password": key}}


async def test_an_operator_pauses_a_key_and_edits_its_limits(
    serve_app: Callable[..., LiveApp], new_page: NewPage, page_log: PageLog
) -> None:
    app = serve_app(api_keys=KEYS)
    headers = {"Authorization": f"Bearer {WRITER}"}
    async with (
        Receiver() as receiver,
        httpx.AsyncClient(base_url=app.base_url, headers=headers, timeout=10) as client,
    ):
        put = await client.put("/v1/flow-keys/customer-42", json={"rate": 50, "parallelism": 10})
        assert put.status_code == 201, put.text
        named = await client.post(
            "/v1/schedules",
            json={
                "event_type": "report.due",
                "payload": {},
                "target": {"type": "webhook", "url": receiver.url("/hook")},
                "trigger": {"type": "cron", "expression": "0 6 * * *"},
                "flow_key": "named-only",
            },
        )
        assert named.status_code == 201, named.text

        page = await new_page(viewport=VIEWPORT, **login(WRITER))
        await page.goto(app.url("/ui/schedules"))
        await page.click("header nav >> text=Flow keys")
        rows = page.locator("#flow-keys tbody tr")
        await expect(rows).to_have_count(2)
        await expect(rows.nth(0)).to_contain_text("50 per 1 s")
        await expect(rows.nth(1)).to_contain_text("no limits")

        await page.click("text=customer-42")
        await expect(page.locator("#state")).to_have_text("running")
        await page.click("button:has-text('Pause')")
        await expect(page.locator("#state")).to_have_text("paused")
        await expect(page.locator("p.notice")).to_contain_text("Paused")
        assert page.url.endswith("/ui/flow-keys/customer-42?done=paused")

        await page.fill('input[name="parallelism"]', "0")
        await page.click("button:has-text('Save limits')")
        await expect(page.locator("#form-error")).to_contain_text("parallelism")
        await expect(page.locator('input[name="parallelism"]')).to_have_value("0")
        assert (await client.get("/v1/flow-keys/customer-42")).json()["parallelism"] == 10

        await page.fill('input[name="parallelism"]', "3")
        await page.uncheck('input[name="paused"]')
        await page.click("button:has-text('Save limits')")
        await expect(page.locator("p.notice")).to_contain_text("Limits saved.")
        await expect(page.locator("#state")).to_have_text("running")
        key = (await client.get("/v1/flow-keys/customer-42")).json()
        assert (key["rate"], key["parallelism"], key["paused"], key["version"]) == (50, 3, False, 3)
    assert page_log.off_host() == []
    # The refused form's page is a 422, which Chromium logs; nothing else went wrong.
    refused = "the server responded with a status of 422 (Unprocessable Entity)"
    assert page_log.errors == [f"console: Failed to load resource: {refused}"]
