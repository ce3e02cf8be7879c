"""Every console page at a laptop's width (1280) and a phone's (390), with some data: each
answers 200 with no script error, and at a phone's width no page is wider than the screen
(a wide table scrolls within itself). The screenshots are written to
$CHRONOQ_CONSOLE_SCREENSHOTS/console when it is set (`docs`: docs/console/, which
docs/operator-console.md shows)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from playwright.async_api import expect

from tests.browser.live import LiveApp, PageLog
from tests.browser.test_console import KEYS, VIEWPORT, WRITER, NewPage, create, dead_letter, login
from tests.browser.test_console_behind_nginx import api
from tests.receiver import Receiver
from tests.waiting import eventually

PHONE = {"width": 390, "height": 844}
WIDTHS = {"1280": VIEWPORT, "390": PHONE}
# The elements that end past the screen's right edge, outermost first (what to fix).
_WIDE = """() => Array.from(document.querySelectorAll("body *"))
  .filter(e => e.getBoundingClientRect().right > window.innerWidth + 1)
  .filter(e => !e.closest("table.list") || e.matches("table.list"))
  .slice(0, 5)
  .map(e => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") +
       (e.className && typeof e.className === "string" ? "." + e.className.split(" ")[0] : ""))"""


async def _made(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    answer = await client.post(path, json=body)
    assert answer.status_code == 201, answer.text
    made: dict[str, Any] = answer.json()
    return made


async def _pages(client: httpx.AsyncClient, receiver: Receiver) -> dict[str, str]:
    """Some of everything; each page's path by its name."""
    assert (await client.put("/v1/tenants/acme", json={"display_name": "Acme"})).status_code == 201
    limits = {"rate": 5, "parallelism": 2}
    assert (await client.put("/v1/flow-keys/customer-42", json=limits)).status_code == 201
    shown = await create(
        client,
        receiver,
        name="nightly-report",
        flow_key="customer-42",
        labels={"team": "billing"},
        trigger={"type": "interval", "every_seconds": 3600},
    )
    for n in range(3):
        await create(client, receiver, name=f"sync-{n}", trigger={"type": "immediate"})
    await dead_letter(client, receiver)
    endpoint = await _made(client, "/v1/endpoints", {"url": receiver.url("/endpoint")})
    assert (await client.put("/v1/topics/orders", json={})).status_code == 201
    await _made(client, "/v1/subscriptions", {"topic": "orders", "endpoint_id": endpoint["id"]})
    await receiver.wait_for(3, "/hook")

    async def rolled_up() -> bool:
        totals = (await client.get("/v1/activity")).json()["totals"]
        return bool(totals["delivered"] >= 3)

    await eventually(rolled_up, within=30, what="the deliveries rolled up")
    return {
        "schedules": "/ui/schedules",
        "schedule": f"/ui/schedules/{shown['id']}",
        "new-schedule": "/ui/schedules/new",
        "activity": "/ui/activity",
        "dead-letters": "/ui/dead-letters",
        "flow-keys": "/ui/flow-keys",
        "flow-key": "/ui/flow-keys/customer-42",
        "endpoints": "/ui/endpoints",
        "endpoint": f"/ui/endpoints/{endpoint['id']}",
        "topics": "/ui/topics",
        "topic": "/ui/topics/orders",
        "tenants": "/ui/tenants",
        "tenant": "/ui/tenants/acme",
    }


async def test_every_page_at_a_laptops_and_a_phones_width(
    serve_app: Callable[..., LiveApp], new_page: NewPage, page_log: PageLog, tmp_path: Path
) -> None:
    folder = Path(os.environ.get("CHRONOQ_CONSOLE_SCREENSHOTS") or tmp_path) / "console"
    folder.mkdir(parents=True, exist_ok=True)
    app = serve_app(api_keys=KEYS, worker_enabled=True, activity_interval=0.3)
    async with Receiver() as receiver, api(app.base_url) as client:
        pages = await _pages(client, receiver)
    overflowing: list[tuple[str, str, int, list[str]]] = []
    for width, viewport in WIDTHS.items():
        page = await new_page(viewport=viewport, **login(WRITER))
        for name, path in pages.items():
            opened = await page.goto(app.url(path))
            assert opened is not None
            assert opened.status == 200, (name, opened.status)
            await expect(page.locator("main h1")).to_be_visible()
            wider = await page.evaluate(
                "() => document.documentElement.scrollWidth - window.innerWidth"
            )
            if wider > 0:
                culprits = await page.evaluate(_WIDE)
                overflowing.append((name, width, wider, culprits))
            picture = folder / f"{name}-{width}.png"
            await page.screenshot(path=str(picture), full_page=True)
            assert picture.stat().st_size > 5_000
    assert overflowing == [], "\n".join(map(str, overflowing))
    assert page_log.errors == []
    assert page_log.off_host() == []
