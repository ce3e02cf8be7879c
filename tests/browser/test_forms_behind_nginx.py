"""The schedule page's edit and backfill forms in Chromium through the shipped balancer
(deploy/nginx.conf): a refused field is marked beside its input with nothing saved, and the
corrected form saves what the API then answers."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from playwright.async_api import expect

from tests.browser.live import LiveApp, PageLog
from tests.browser.test_console import KEYS, VIEWPORT, WRITER, NewPage, create, login
from tests.browser.test_console_behind_nginx import api
from tests.nginx import NGINX_CONF, find_nginx, start_nginx
from tests.receiver import Receiver


async def test_the_edit_and_backfill_forms_through_the_shipped_nginx(
    serve_app: Callable[..., LiveApp], new_page: NewPage, page_log: PageLog, tmp_path: Path
) -> None:
    replica = serve_app(api_keys=KEYS)
    nginx = start_nginx(find_nginx(), [replica.port], tmp_path / "nginx", NGINX_CONF)
    try:
        await nginx.wait_serving(timeout=15.0)
        async with Receiver() as receiver, api(nginx.base_url) as client:
            made = await create(
                client, receiver, name="hourly", trigger={"type": "cron", "expression": "0 * * * *"}
            )
            page = await new_page(viewport=VIEWPORT, **login(WRITER))
            await page.goto(nginx.base_url + f"/ui/schedules/{made['id']}")

            await page.fill("#edit-payload", '{"report": "weekly"')
            await page.fill("#edit-trigger", '{"type": "cron", "expression": "30 * * * *"}')
            await page.click("button:text-is('Save changes')")
            await expect(page.locator("#error-payload")).to_contain_text("not JSON")
            assert (await client.get(f"/v1/schedules/{made['id']}")).json() == made
            await page.fill("#edit-payload", '{"report": "weekly"}')
            await page.click("button:text-is('Save changes')")
            await expect(page.locator("p.notice")).to_have_text("Saved.")
            saved = (await client.get(f"/v1/schedules/{made['id']}")).json()
            assert saved["payload"] == {"report": "weekly"}
            assert saved["trigger"]["expression"] == "30 * * * *"
            shown = json.loads(await page.locator("#edit-trigger").input_value())
            assert shown["expression"] == "30 * * * *"

            hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
            past = (hour - timedelta(hours=3)).isoformat()
            await page.fill("#backfill-from", past)
            await page.fill("#backfill-to", (hour + timedelta(days=2)).isoformat())
            await page.click("button:text-is('Backfill')")
            await expect(page.locator("#error-backfill-to")).to_be_visible()
            await page.fill("#backfill-to", (hour - timedelta(minutes=1)).isoformat())
            await page.click("button:text-is('Backfill')")
            await expect(page.locator("p.notice")).to_contain_text("Backfilled")
            occurrences = (await client.get(f"/v1/schedules/{made['id']}/occurrences")).json()
            backfilled = [o for o in occurrences["items"] if o["origin"] == "backfill"]
            assert len(backfilled) == 3  # :30 of each of the three hours before this one
    finally:
        nginx.stop()
    refused = "the server responded with a status of 422 (Unprocessable Entity)"
    assert page_log.errors == [f"console: Failed to load resource: {refused}"] * 2
    assert page_log.off_host() == []
