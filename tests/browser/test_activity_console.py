"""The console's charts in Chromium through the shipped balancer (deploy/nginx.conf): the
Activity page's figures are the API's, its bars carry their minute's numbers, the header
says the same dead letters, the chart fits a laptop's and a phone's width, and it reads
with JavaScript off. Screenshots at both widths (written to $CHRONOQ_CONSOLE_SCREENSHOTS
when set, as docs/ holds)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from playwright.async_api import expect

from tests.browser.live import LiveApp, PageLog
from tests.browser.test_console import KEYS, VIEWPORT, WRITER, NewPage, dead_letter, login
from tests.browser.test_console_behind_nginx import api
from tests.nginx import NGINX_CONF, find_nginx, start_nginx
from tests.receiver import Receiver
from tests.waiting import eventually

PHONE = {"width": 390, "height": 844}
FIGURES = ("delivered", "failed", "dead_lettered")


async def _totals(client: httpx.AsyncClient) -> dict[str, Any]:
    found: dict[str, Any] = (await client.get("/v1/activity")).json()["totals"]
    return found


async def test_the_activity_page_shows_the_apis_figures_at_a_laptops_and_a_phones_width(
    serve_app: Callable[..., LiveApp], new_page: NewPage, page_log: PageLog, tmp_path: Path
) -> None:
    folder = Path(os.environ.get("CHRONOQ_CONSOLE_SCREENSHOTS") or tmp_path)
    replica = serve_app(api_keys=KEYS, worker_enabled=True, activity_interval=0.3)
    nginx = start_nginx(find_nginx(), [replica.port], tmp_path / "nginx", NGINX_CONF)
    try:
        await nginx.wait_serving(timeout=15.0)
        async with Receiver() as receiver, api(nginx.base_url) as client:
            for n in range(5):
                made = await client.post(
                    "/v1/schedules",
                    json={
                        "event_type": "report.due",
                        "payload": {"n": n},
                        "target": {"type": "webhook", "url": receiver.url("/hook")},
                        "trigger": {"type": "immediate"},
                    },
                )
                assert made.status_code == 201, made.text
            await receiver.wait_for(5, "/hook")
            await dead_letter(client, receiver)
            await dead_letter(client, receiver, "crm-push", "crm.contact.updated")

            async def rolled_up() -> bool:
                totals = await _totals(client)
                return (totals["delivered"], totals["dead_lettered"]) == (5, 2)

            await eventually(rolled_up, within=30, what="the attempts rolled up")
            totals = await _totals(client)

            page = await new_page(viewport=VIEWPORT, **login(WRITER))
            await page.goto(nginx.base_url + "/ui/activity")
            chart = page.locator("figure.activity")
            for name in FIGURES:
                await expect(chart.locator(f"[data-figure='{name}']")).to_have_text(
                    str(totals[name])
                )
            bars = chart.locator("rect.bar-delivered")
            assert await bars.count() >= 1
            titles = await chart.locator("svg title").evaluate_all(
                "found => found.map(t => t.textContent)"
            )
            assert any("delivered" in title for title in titles)
            header = page.locator("#live")
            await expect(header.locator("div:has(dt:text-is('dead letters')) dd")).to_have_text(
                str(totals["dead_lettered"])
            )
            picture = folder / "console-activity.png"
            await page.screenshot(path=str(picture), full_page=True)
            assert picture.stat().st_size > 10_000

            phone = await new_page(viewport=PHONE, **login(WRITER))
            await phone.goto(nginx.base_url + "/ui/activity")
            box = await phone.locator("figure.activity").bounding_box()
            assert box is not None
            assert box["x"] >= 0, box
            assert box["x"] + box["width"] <= PHONE["width"], box
            picture = folder / "console-activity-phone.png"
            await phone.screenshot(path=str(picture), full_page=True)
            assert picture.stat().st_size > 10_000

            # Drawn by the server: the figures are there with JavaScript off.
            still = await new_page(java_script_enabled=False, viewport=VIEWPORT, **login(WRITER))
            await still.goto(nginx.base_url + "/ui/activity?window=24h")
            await expect(still.locator("[data-figure='delivered']")).to_have_text(
                str(totals["delivered"])
            )
            await expect(still.locator("nav.windows b")).to_have_text("last day")
    finally:
        nginx.stop()
    assert page_log.errors == []
    assert page_log.off_host() == []
