"""Endpoints in the console, in a browser: an endpoint whose receiver fails shows its circuit
open, its failures in a row and its recent attempts as the API reports them; Rotate shows the
new secret once; Enable closes the circuit; and the two pages as screenshots (written to
$CHRONOQ_CONSOLE_SCREENSHOTS when set, as docs/ holds)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import httpx
from playwright.async_api import expect

from tests.browser.live import LiveApp, PageLog
from tests.browser.test_console import KEYS, VIEWPORT, WRITER, NewPage, login
from tests.browser.test_tenant_console import api
from tests.receiver import Receiver, Reply
from tests.waiting import eventually


async def _endpoint(client: httpx.AsyncClient, receiver: Receiver, name: str, path: str) -> str:
    made = await client.post(
        "/v1/endpoints",
        json={
            "name": name,
            "url": receiver.url(path),
            "headers": {"Authorization": "Bearer not-shown"},
            "flow": {"rate": 50, "parallelism": 10},
            "circuit": {"failure_threshold": 3, "cooldown_seconds": 300},
        },
    )
    assert made.status_code == 201, made.text
    endpoint_id: str = made.json()["id"]
    return endpoint_id


async def test_an_open_circuit_its_attempts_rotate_and_enable_at_1280(
    serve_app: Callable[..., LiveApp], new_page: NewPage, page_log: PageLog, tmp_path: Path
) -> None:
    folder = Path(os.environ.get("CHRONOQ_CONSOLE_SCREENSHOTS") or tmp_path)
    app = serve_app(api_keys=KEYS, worker_enabled=True)
    async with Receiver() as receiver, api(app) as client:
        receiver.always("/down", Reply(503, body="upstream unavailable"))
        down = await _endpoint(client, receiver, "billing-eu", "/down")
        await _endpoint(client, receiver, "reports", "/reports")
        for n in range(4):
            created = await client.post(
                "/v1/schedules",
                json={
                    "event_type": "invoice.due",
                    "payload": {"n": n},
                    "target": {"type": "endpoint", "endpoint_id": down},
                    "trigger": {"type": "immediate"},
                },
            )
            assert created.status_code == 201, created.text

        async def opened() -> bool:
            found = (await client.get(f"/v1/endpoints/{down}")).json()
            return bool((found["state"], found["in_flight"]) == ("open", 0))

        # Open, and every attempt that started before it opened settled.
        await eventually(opened, what="the circuit opened")
        attempts = (await client.get(f"/v1/endpoints/{down}/attempts")).json()["items"]

        page = await new_page(viewport=VIEWPORT, **login(WRITER))
        await page.goto(app.url("/ui/endpoints"))
        await expect(page.locator("#endpoints")).to_contain_text("billing-eu")
        await expect(page.locator("#endpoints")).to_contain_text("open")
        picture = folder / "console-endpoints.png"
        await page.screenshot(path=str(picture))
        assert picture.stat().st_size > 10_000

        await page.click("text=billing-eu")
        await expect(page.locator("#state")).to_have_text("open")
        await expect(page.locator("#attempts tbody tr")).to_have_count(len(attempts))
        await expect(page.locator("#attempts")).to_contain_text("upstream unavailable")
        await expect(page.locator("#headers")).to_have_text("Authorization: ***")
        picture = folder / "console-endpoint.png"
        await page.screenshot(path=str(picture), full_page=True)
        assert picture.stat().st_size > 10_000

        await page.click("#rotate button")
        secret = await page.locator("#secret-value").text_content()
        assert secret is not None
        assert secret.startswith("whsec_")
        # A reload sends the form again: nothing more is rotated, and no secret is shown.
        await page.reload()
        await expect(page.locator("#form-error")).to_contain_text("nothing was rotated")
        await expect(page.locator("#secret-value")).to_have_count(0)
        await expect(page.locator("#secrets tbody tr")).to_have_count(2)

        receiver.always("/down", Reply())  # the receiver is back
        await page.click("#enable button")
        await expect(page.locator("#state")).to_have_text("closed")
    assert page_log.off_host() == []
    assert [e for e in page_log.errors if "409" not in e] == []
