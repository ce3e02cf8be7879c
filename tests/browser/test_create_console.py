"""The create form in Chromium through the shipped balancer: the fields of the chosen
trigger only, the next fire times following what is typed, a refused field marked beside
its input, and the schedule made; with JavaScript off every field shows and the form's
own button previews. Screenshots at a laptop's and a phone's width."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

from playwright.async_api import expect

from tests.browser.live import LiveApp, PageLog
from tests.browser.test_activity_console import PHONE
from tests.browser.test_console import KEYS, VIEWPORT, WRITER, NewPage, login
from tests.browser.test_console_behind_nginx import api
from tests.nginx import NGINX_CONF, find_nginx, start_nginx
from tests.receiver import Receiver


async def test_a_schedule_is_made_from_the_form_with_its_fire_times_as_typed(
    serve_app: Callable[..., LiveApp], new_page: NewPage, page_log: PageLog, tmp_path: Path
) -> None:
    folder = Path(os.environ.get("CHRONOQ_CONSOLE_SCREENSHOTS") or tmp_path)
    replica = serve_app(api_keys=KEYS)
    nginx = start_nginx(find_nginx(), [replica.port], tmp_path / "nginx", NGINX_CONF)
    try:
        await nginx.wait_serving(timeout=15.0)
        async with Receiver() as receiver, api(nginx.base_url) as client:
            page = await new_page(viewport=VIEWPORT, **login(WRITER))
            await page.goto(nginx.base_url + "/ui/schedules")
            await page.click("#new-schedule")
            await expect(page.locator("h1")).to_have_text("New schedule")
            # Only the chosen trigger's fields show.
            await expect(page.locator("#new-expression")).to_be_visible()
            await expect(page.locator("#new-every_seconds")).to_be_hidden()
            await page.select_option("#new-trigger_type", "interval")
            await expect(page.locator("#new-every_seconds")).to_be_visible()
            await expect(page.locator("#new-expression")).to_be_hidden()
            await page.select_option("#new-trigger_type", "cron")
            # The next fire times follow the expression as it is typed.
            await page.fill("#new-expression", "30 7 * * *")
            times = page.locator("#preview-times time")
            await expect(times.first).to_have_attribute("datetime", re.compile("T07:30:00"))
            await expect(times).to_have_count(5)
            for text in await times.evaluate_all("ts => ts.map(t => t.dateTime)"):
                assert "T07:30:00" in text, text
            await page.fill("#new-expression", "61 * * * *")
            await expect(page.locator("#preview-error")).to_be_visible()
            await page.fill("#new-expression", "30 7 * * *")
            await page.fill("#new-name", "morning-digest")
            await page.fill("#new-event_type", "digest.send")
            await page.fill("#new-target_url", receiver.url("/digest"))
            await page.fill("#new-payload", '{"edition": "morning"}')
            await page.fill("#new-max_attempts", "many")
            await expect(times.first).to_have_attribute("datetime", re.compile("T07:30:00"))
            await page.screenshot(path=str(folder / "console-create.png"), full_page=True)
            await page.click("button:text-is('Create')")
            await expect(page.locator("#error-max_attempts")).to_have_text("a whole number")
            await expect(page.locator("#form-error")).to_contain_text("Nothing was stored")
            assert (await client.get("/v1/schedules")).json()["items"] == []
            await page.fill("#new-max_attempts", "3")
            await page.click("button:text-is('Create')")
            await expect(page.locator("p.notice")).to_have_text("Created.")
            (made,) = (await client.get("/v1/schedules")).json()["items"]
            assert (made["name"], made["max_attempts"]) == ("morning-digest", 3)
            assert made["trigger"]["expression"] == "30 7 * * *"
            assert made["payload"] == {"edition": "morning"}

            phone = await new_page(viewport=PHONE, **login(WRITER))
            await phone.goto(nginx.base_url + "/ui/schedules/new")
            for field in ("#create-form", "#new-target_url", "#new-payload"):
                box = await phone.locator(field).bounding_box()
                assert box is not None
                assert box["x"] + box["width"] <= PHONE["width"], (field, box)
            await phone.screenshot(path=str(folder / "console-create-phone.png"), full_page=True)

            # Without the script: every group shows, and the button previews.
            still = await new_page(java_script_enabled=False, viewport=VIEWPORT, **login(WRITER))
            await still.goto(nginx.base_url + "/ui/schedules/new")
            await expect(still.locator("#new-every_seconds")).to_be_visible()
            await still.select_option("#new-trigger_type", "interval")
            await still.fill("#new-every_seconds", "600")
            await still.click("button:text-is('Preview fire times')")
            await expect(still.locator("#preview-times time")).to_have_count(5)
            assert len((await client.get("/v1/schedules")).json()["items"]) == 1
    finally:
        nginx.stop()
    # The one refused post: its page answered 422, which the browser logs.
    refused = "the server responded with a status of 422 (Unprocessable Entity)"
    assert page_log.errors == [f"console: Failed to load resource: {refused}"]
    assert page_log.off_host() == []
