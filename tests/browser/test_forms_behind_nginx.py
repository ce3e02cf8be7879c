"""The console's forms in Chromium through the shipped balancer (deploy/nginx.conf): the
schedule page's edit and backfill forms, a tenant's settings, a flow key's limits and an
endpoint's rotation. A refused field is marked beside its input with nothing saved, and the
corrected form saves what the API then answers."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

from playwright.async_api import expect

from tests.browser.live import LiveApp, PageLog
from tests.browser.test_console import KEYS, VIEWPORT, WRITER, NewPage, create, login
from tests.browser.test_console_behind_nginx import api
from tests.browser.test_endpoint_console import _endpoint
from tests.nginx import NGINX_CONF, find_nginx, start_nginx
from tests.receiver import Receiver


@asynccontextmanager
async def behind_nginx(replica: LiveApp, folder: Path) -> AsyncIterator[str]:
    """The shipped balancer in front of `replica`: its base URL; stopped at the end."""
    nginx = start_nginx(find_nginx(), [replica.port], folder / "nginx", NGINX_CONF)
    try:
        await nginx.wait_serving(timeout=15.0)
        yield nginx.base_url
    finally:
        nginx.stop()


async def test_the_edit_and_backfill_forms_through_the_shipped_nginx(
    serve_app: Callable[..., LiveApp], new_page: NewPage, page_log: PageLog, tmp_path: Path
) -> None:
    replica = serve_app(api_keys=KEYS)
    async with (
        behind_nginx(replica, tmp_path) as base_url,
        Receiver() as receiver,
        api(base_url) as client,
    ):
        made = await create(
            client, receiver, name="hourly", trigger={"type": "cron", "expression": "0 * * * *"}
        )
        page = await new_page(viewport=VIEWPORT, **login(WRITER))
        await page.goto(base_url + f"/ui/schedules/{made['id']}")

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
    refused = "the server responded with a status of 422 (Unprocessable Entity)"
    assert page_log.errors == [f"console: Failed to load resource: {refused}"] * 2
    assert page_log.off_host() == []


async def test_the_tenant_flow_key_and_endpoint_forms_through_the_shipped_nginx(
    serve_app: Callable[..., LiveApp], new_page: NewPage, page_log: PageLog, tmp_path: Path
) -> None:
    replica = serve_app(api_keys=KEYS)
    async with (
        behind_nginx(replica, tmp_path) as base_url,
        Receiver() as receiver,
        api(base_url) as client,
    ):
        assert (await client.put("/v1/tenants/acme", json={})).status_code == 201
        put = await client.put("/v1/flow-keys/customer-42", json={"parallelism": 10})
        assert put.status_code == 201, put.text
        endpoint = await _endpoint(client, receiver, "billing", "/billing")
        page = await new_page(viewport=VIEWPORT, **login(WRITER))

        await page.goto(base_url + "/ui/tenants/acme")
        await page.fill("#edit-weight", "5")
        await page.fill("#edit-max_in_flight", "0")
        await page.click("button:has-text('Save settings')")
        await expect(page.locator("#edit-max_in_flight + .field-error")).to_have_id(
            "error-max_in_flight"
        )
        assert (await client.get("/v1/tenants/acme")).json()["weight"] == 1
        await page.fill("#edit-max_in_flight", "8")
        await page.click("button:has-text('Save settings')")
        await expect(page.locator("p.notice")).to_have_text("Settings saved.")
        tenant = (await client.get("/v1/tenants/acme")).json()
        assert (tenant["weight"], tenant["quotas"]["max_in_flight"]) == (5, 8)

        await page.goto(base_url + "/ui/flow-keys/customer-42")
        await page.fill('input[name="parallelism"]', "0")
        await page.click("button:has-text('Save limits')")
        await expect(page.locator("#form-error")).to_contain_text("parallelism")
        assert (await client.get("/v1/flow-keys/customer-42")).json()["parallelism"] == 10
        await page.fill('input[name="parallelism"]', "3")
        await page.click("button:has-text('Save limits')")
        await expect(page.locator("p.notice")).to_contain_text("Limits saved.")
        assert (await client.get("/v1/flow-keys/customer-42")).json()["parallelism"] == 3

        await page.goto(base_url + f"/ui/endpoints/{endpoint}")
        await page.click("#rotate button")
        secret = await page.locator("#secret-value").text_content()
        assert secret is not None
        assert secret.startswith("whsec_")
        found = (await client.get(f"/v1/endpoints/{endpoint}")).json()
        assert len(found["signing_secrets"]) == 2
        assert secret[-4:] == found["signing_secrets"][-1]["hint"][-4:]
    assert page_log.off_host() == []
    assert [e for e in page_log.errors if "422" not in e] == []
