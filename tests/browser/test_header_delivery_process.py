"""The console's header and Activity page in Chromium on PostgreSQL, where `chronoq serve`
delivers in a process of its own: their figures are the attempt log's, what that process
delivered, as GET /v1/activity answers (the API process itself delivers nothing)."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from playwright.async_api import expect

from tests.browser.live import PageLog
from tests.browser.test_console import VIEWPORT, NewPage
from tests.e2e.processes import Services
from tests.e2e.test_delivery_process import immediate, one_delivery_process, settings
from tests.receiver import Receiver
from tests.waiting import eventually


@pytest.mark.postgres
async def test_the_header_shows_what_the_delivery_process_delivered(
    postgres_url: str, new_page: NewPage, page_log: PageLog, tmp_path: Path
) -> None:
    services = Services(tmp_path)
    try:
        service = await services.start(
            "replica", settings(postgres_url, CHRONOQ_ACTIVITY_INTERVAL="0.5")
        )
        await one_delivery_process(service)
        async with (
            Receiver() as receiver,
            httpx.AsyncClient(base_url=service.base_url, trust_env=False) as client,
        ):
            answer = await client.post(
                "/v1/schedules/batch", json={"items": [immediate(receiver, n) for n in range(12)]}
            )
            assert answer.status_code == 201, answer.text
            await receiver.wait_for(12, path="/hook", timeout=30)

            async def rolled_up() -> bool:
                totals = (await client.get("/v1/activity")).json()["totals"]
                return bool(totals["delivered"] >= 12)

            await eventually(rolled_up, within=30, what="the deliveries rolled up")
            totals = (await client.get("/v1/activity")).json()["totals"]

            page = await new_page(viewport=VIEWPORT)
            await page.goto(service.base_url + "/ui/activity")
            figure = page.locator("figure.activity")
            await expect(figure.locator("[data-figure='delivered']")).to_have_text(
                str(totals["delivered"])
            )
            header = page.locator("#live")
            rate = header.locator("div:has(dt:text-is('delivered/s')) dd")
            await expect(rate).not_to_have_text(re.compile(r"^(0|-)$"))
            lag = header.locator("div:has(dt:text-is('lag p99')) dd")
            await expect(lag).not_to_have_text("-")
            await expect(header.locator("div:has(dt:text-is('dead letters')) dd")).to_have_text(
                str(totals["dead_lettered"])
            )
            await expect(header).to_have_attribute("title", re.compile("up to"))
    finally:
        services.close()
    assert page_log.errors == []
    assert page_log.off_host() == []
