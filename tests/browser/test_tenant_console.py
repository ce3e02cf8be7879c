"""Tenants in the console, in a browser: the header's switcher (with JavaScript on and off)
showing one tenant's schedules only; a tenant key with no switcher, refused another tenant;
the tenant pages: usage as the API reports it, the settings form with a refused value named
beside its field, Pause and Resume, a stale form refused, the default tenant with no pause;
and the two pages as screenshots (written to $CHRONOQ_CONSOLE_SCREENSHOTS when set, as docs/
holds)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from playwright.async_api import Page, expect

from tests.browser.live import LiveApp, PageLog
from tests.browser.test_console import KEYS, VIEWPORT, WRITER, NewPage, login
from tests.receiver import Receiver, Reply
from tests.waiting import eventually

# What Chromium logs for a page answered with a refusal (the page itself shows why).
REFUSED = "console: Failed to load resource: the server responded with a status of {}"


@asynccontextmanager
async def api(app: LiveApp, key: str = WRITER) -> AsyncIterator[httpx.AsyncClient]:
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(
        base_url=app.base_url, headers=headers, timeout=10, trust_env=False
    ) as client:
        yield client


async def put_tenant(client: httpx.AsyncClient, tenant: str, **body: Any) -> dict[str, Any]:
    response = await client.put(f"/v1/tenants/{tenant}", json=body)
    assert response.status_code in (200, 201), response.text
    made: dict[str, Any] = response.json()
    return made


async def create_in(
    client: httpx.AsyncClient, receiver: Receiver, tenant: str, name: str, **spec: Any
) -> dict[str, Any]:
    body = {
        "name": name,
        "event_type": "report.due",
        "payload": {},
        "target": {"type": "webhook", "url": receiver.url("/hook")},
        "trigger": {"type": "cron", "expression": "0 6 * * *"},
        **spec,
    }
    response = await client.post("/v1/schedules", json=body, headers={"Chronoq-Tenant": tenant})
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


async def switch(page: Page, tenant: str) -> None:
    """Choose `tenant` in the header's list and press Switch."""
    await page.select_option("#switch-choice", tenant)
    await page.click("#switcher button")
    await expect(page.locator("#tenant")).to_have_text(tenant)


async def test_an_operator_switches_tenant_and_sees_only_its_schedules(
    serve_app: Callable[..., LiveApp], new_page: NewPage, page_log: PageLog
) -> None:
    app = serve_app(api_keys=KEYS)
    async with Receiver() as receiver, api(app) as client:
        await put_tenant(client, "acme", display_name="Acme Corp")
        await put_tenant(client, "zeta")
        await create_in(client, receiver, "default", "our-report")
        theirs = await create_in(client, receiver, "acme", "acme-report")
        await create_in(client, receiver, "acme", "acme-digest")

        page = await new_page(viewport=VIEWPORT, **login(WRITER))
        await page.goto(app.url("/ui/schedules"))
        rows = page.locator("#schedules tbody tr")
        await expect(page.locator("#tenant")).to_have_text("default")
        await expect(rows).to_have_count(1)
        await expect(rows.first).to_contain_text("our-report")
        await expect(page.locator("#switch-choice option")).to_have_text(
            ["acme · Acme Corp", "default", "zeta"]
        )

        await switch(page, "acme")
        assert page.url == app.url("/ui/schedules?tenant=acme")
        await expect(rows).to_have_count(2)
        await expect(page.locator("#schedules")).not_to_contain_text("our-report")

        # Every link and form keeps the tenant: a schedule's page, its Pause button.
        await page.click("text=acme-report")
        await expect(page.locator("h1")).to_contain_text("acme-report")
        await page.click("button:has-text('Pause')")
        await expect(page.locator("#status")).to_have_text("paused")
        assert page.url == app.url(f"/ui/schedules/{theirs['id']}?done=paused&tenant=acme")
        mine = await client.get(f"/v1/schedules/{theirs['id']}", headers={"Chronoq-Tenant": "acme"})
        assert mine.json()["status"] == "paused"
        await page.click("header nav >> text=Dead letters")
        assert page.url == app.url("/ui/dead-letters?tenant=acme")
        await expect(page.locator("#tenant")).to_have_text("acme")

        # A tenant typed by its id; one that does not exist is a page naming it.
        await page.fill("#switch-other", "zeta")
        await page.click("#switcher button")
        await expect(page.locator("#tenant")).to_have_text("zeta")
        assert page.url == app.url("/ui/dead-letters?tenant=zeta")
        await page.fill("#switch-other", "nobody")
        await page.click("#switcher button")
        await expect(page.locator("main p.error")).to_have_text(
            "tenant nobody does not exist: choose another in the header."
        )
        assert page.url == app.url("/ui/dead-letters?tenant=nobody")
    assert page_log.off_host() == []
    assert page_log.errors == [REFUSED.format("404 (Not Found)")]


async def test_the_switcher_works_with_javascript_off(
    serve_app: Callable[..., LiveApp], new_page: NewPage
) -> None:
    app = serve_app(api_keys=KEYS)
    async with Receiver() as receiver, api(app) as client:
        await put_tenant(client, "acme")
        await create_in(client, receiver, "default", "our-report", event_type="ours.due")
        await create_in(client, receiver, "acme", "acme-report", event_type="report.due")
        await create_in(client, receiver, "acme", "acme-sync", event_type="sync.run")

    page = await new_page(java_script_enabled=False, **login(WRITER))
    await page.goto(app.url("/ui/schedules"))
    await switch(page, "acme")
    rows = page.locator("#schedules tbody tr")
    await expect(rows).to_have_count(2)
    # The filter form, a GET, stays in the tenant.
    await page.fill('input[name="event_type"]', "sync.run")
    await page.click("text=Filter")
    await expect(rows).to_have_count(1)
    await expect(rows.first).to_contain_text("acme-sync")
    await expect(page.locator("#tenant")).to_have_text("acme")
    assert "tenant=acme" in page.url
    await switch(page, "default")
    assert page.url == app.url("/ui/schedules")
    await expect(rows).to_have_count(1)
    await expect(rows.first).to_contain_text("our-report")


async def test_a_tenant_key_sees_no_switcher_and_is_refused_another_tenant(
    serve_app: Callable[..., LiveApp], new_page: NewPage
) -> None:
    app = serve_app(api_keys=KEYS)
    async with Receiver() as receiver, api(app) as client:
        await put_tenant(client, "acme")
        await put_tenant(client, "zeta")
        await create_in(client, receiver, "acme", "acme-report")
        await create_in(client, receiver, "zeta", "zeta-report")
        made = await client.post("/v1/tenants/acme/keys", json={"name": "portal", "role": "write"})
        assert made.status_code == 201, made.text

    page = await new_page(viewport=VIEWPORT, **login(made.json()["key"]))
    await page.goto(app.url("/ui/schedules"))
    await expect(page.locator("#tenant")).to_have_text("acme")
    await expect(page.locator("header .who")).to_contain_text("acme/portal")
    await expect(page.locator("#schedules tbody tr")).to_have_count(1)
    await expect(page.locator("#schedules")).to_contain_text("acme-report")
    assert await page.locator("#switcher").count() == 0

    refused = await page.goto(app.url("/ui/schedules?tenant=zeta"))
    assert refused is not None
    assert refused.status == 403
    await expect(page.locator("main p.error")).to_have_text("this key acts in tenant acme only")
    assert "zeta-report" not in await page.content()

    # Its own tenant's page, read-only.
    await page.click("header nav >> text=Tenant")
    assert page.url == app.url("/ui/tenants/acme")
    await expect(page.locator("#usage-schedules")).to_have_text("1")
    assert await page.locator("main button").count() == 0
    assert await page.locator("main form").count() == 0


async def dead_letter_in(
    client: httpx.AsyncClient, receiver: Receiver, tenant: str, name: str
) -> None:
    """A schedule of `tenant` whose one attempt fails, once the worker dead-lettered it."""
    receiver.script(f"/{name}", Reply(status=503, body="upstream down"))
    await create_in(
        client,
        receiver,
        tenant,
        name,
        target={"type": "webhook", "url": receiver.url(f"/{name}")},
        trigger={"type": "immediate"},
        max_attempts=1,
    )

    async def settled() -> bool:
        listed = await client.get("/v1/dead-letters", headers={"Chronoq-Tenant": tenant})
        return any(item["schedule_name"] == name for item in listed.json()["items"])

    await eventually(settled, within=20)


async def test_the_tenant_page_shows_the_usage_the_api_reports(
    serve_app: Callable[..., LiveApp], new_page: NewPage, page_log: PageLog
) -> None:
    app = serve_app(api_keys=KEYS, worker_enabled=True)
    async with Receiver() as receiver, api(app) as client:
        await put_tenant(client, "billing", display_name="Billing team", weight=3)
        for name in ("invoices", "reminders", "ledger"):
            await create_in(client, receiver, "billing", name)
        await dead_letter_in(client, receiver, "billing", "crm-push")
        usage = (await client.get("/v1/tenants/billing")).json()["usage"]
        assert (usage["schedules"], usage["dead_letters"]) == (3, 1)

        page = await new_page(viewport=VIEWPORT, **login(WRITER))
        await page.goto(app.url("/ui/schedules"))
        await page.click("header nav >> text=Tenants")
        row = page.locator("#tenants tbody tr", has_text="billing")
        await expect(row.locator("td")).to_have_text(
            ["billing", "Billing team", "3", "no", "3", "0", "1", "Open"]
        )
        await row.locator("a", has_text="billing").click()
        await expect(page.locator("h1")).to_contain_text("billing")
        for name, value in usage.items():
            await expect(page.locator(f"#usage-{name}")).to_have_text(str(value))
        # "Its schedules": the console in that tenant.
        await page.click("#tenant-schedules")
        await expect(page.locator("#tenant")).to_have_text("billing")
        await expect(page.locator("#schedules tbody tr")).to_have_count(4)
    assert page_log.off_host() == []
    assert page_log.errors == []


async def test_edit_weight_and_a_quota_and_a_refused_value_is_named_beside_it(
    serve_app: Callable[..., LiveApp], new_page: NewPage, page_log: PageLog
) -> None:
    app = serve_app(api_keys=KEYS)
    async with api(app) as client:
        await put_tenant(client, "acme", display_name="Acme Corp")
        page = await new_page(viewport=VIEWPORT, **login(WRITER))
        await page.goto(app.url("/ui/tenants/acme"))
        await page.fill("#edit-weight", "5")
        await page.fill("#edit-max_in_flight", "8")
        await page.click("button:has-text('Save settings')")
        await expect(page.locator("p.notice")).to_have_text("Settings saved.")
        await expect(page.locator("#weight")).to_have_text("5")
        await expect(page.locator("#quota-max_in_flight")).to_have_text("8")
        tenant = (await client.get("/v1/tenants/acme")).json()
        assert (tenant["weight"], tenant["quotas"]["max_in_flight"]) == (5, 8)
        assert (tenant["display_name"], tenant["version"]) == ("Acme Corp", 2)

        await page.fill("#edit-weight", "6")
        await page.fill("#edit-max_in_flight", "0")
        await page.click("button:has-text('Save settings')")
        await expect(page.locator("#form-error")).to_contain_text("Nothing was saved")
        message = page.locator("#error-max_in_flight")
        await expect(message).to_have_text("Input should be greater than or equal to 1")
        # Beside its input, which keeps what was typed.
        beside = page.locator("#edit-max_in_flight + .field-error")
        await expect(beside).to_have_id("error-max_in_flight")
        await expect(page.locator("#edit-max_in_flight")).to_have_value("0")
        await expect(page.locator("#edit-max_in_flight")).to_have_attribute("aria-invalid", "true")
        await expect(page.locator("#edit-weight")).to_have_value("6")
        await expect(page.locator("#error-weight")).to_have_count(0)
        tenant = (await client.get("/v1/tenants/acme")).json()
        assert (tenant["weight"], tenant["quotas"]["max_in_flight"], tenant["version"]) == (5, 8, 2)
    assert page_log.off_host() == []
    assert page_log.errors == [REFUSED.format("422 (Unprocessable Entity)")]


async def test_pause_then_resume_a_tenant(
    serve_app: Callable[..., LiveApp], new_page: NewPage
) -> None:
    app = serve_app(api_keys=KEYS)
    async with api(app) as client:
        await put_tenant(client, "acme")
        page = await new_page(viewport=VIEWPORT, **login(WRITER))
        await page.goto(app.url("/ui/tenants/acme"))
        await expect(page.locator("#state")).to_have_text("running")
        await page.click("#press button:has-text('Pause')")
        await expect(page.locator("#state")).to_have_text("paused")
        await expect(page.locator("p.notice")).to_contain_text("Paused")
        assert (await client.get("/v1/tenants/acme")).json()["paused"] is True
        await page.click("#press button:has-text('Resume')")
        await expect(page.locator("#state")).to_have_text("running")
        await expect(page.locator("p.notice")).to_contain_text("Resumed")
        tenant = (await client.get("/v1/tenants/acme")).json()
        assert (tenant["paused"], tenant["version"]) == (False, 3)


async def test_a_stale_form_is_refused_and_nothing_is_overwritten(
    serve_app: Callable[..., LiveApp], new_page: NewPage
) -> None:
    app = serve_app(api_keys=KEYS)
    async with api(app) as client:
        await put_tenant(client, "acme", weight=2)
        page = await new_page(viewport=VIEWPORT, **login(WRITER))
        await page.goto(app.url("/ui/tenants/acme"))
        await put_tenant(client, "acme", weight=9)  # someone else, meanwhile
        await page.fill("#edit-weight", "3")
        await page.click("button:has-text('Save settings')")
        await expect(page.locator("#form-error")).to_contain_text(
            "This tenant changed since the page was loaded: nothing was saved."
        )
        await expect(page.locator("#edit-weight")).to_have_value("9")
        await expect(page.locator("#version")).to_have_text("2")
        assert (await client.get("/v1/tenants/acme")).json()["weight"] == 9


async def test_the_default_tenants_page_has_no_pause_button(
    serve_app: Callable[..., LiveApp], new_page: NewPage
) -> None:
    app = serve_app(api_keys=KEYS)
    page = await new_page(viewport=VIEWPORT, **login(WRITER))
    await page.goto(app.url("/ui/tenants/default"))
    await expect(page.locator("h1")).to_contain_text("default")
    await expect(page.locator("main button")).to_have_text(["Save settings"])
    assert await page.locator("#press").count() == 0
    assert await page.locator("#edit-max_deliveries_per_second").count() == 0
    assert await page.locator("#edit-max_in_flight").count() == 0
    await expect(page.locator("#edit-max_schedules")).to_be_visible()


async def test_the_tenant_pages_at_1280_by_800(
    serve_app: Callable[..., LiveApp], new_page: NewPage, page_log: PageLog, tmp_path: Path
) -> None:
    """Screenshots; `CHRONOQ_CONSOLE_SCREENSHOTS=docs` writes them where
    docs/operator-console.md links them."""
    folder = Path(os.environ.get("CHRONOQ_CONSOLE_SCREENSHOTS") or tmp_path)
    app = serve_app(api_keys=KEYS, worker_enabled=True)
    async with Receiver() as receiver, api(app) as client:
        await put_tenant(
            client,
            "billing",
            display_name="Billing team",
            weight=3,
            quotas={"max_schedules": 10000, "max_deliveries_per_second": 200},
            retention_seconds=604800,
        )
        await put_tenant(client, "growth", display_name="Growth experiments", paused=True)
        await put_tenant(client, "platform", display_name="Platform", weight=2)
        for tenant, names in [
            ("billing", ["invoices", "reminders", "ledger-export"]),
            ("growth", ["weekly-digest"]),
            ("platform", ["cleanup", "hourly-sync"]),
            ("default", ["nightly-report"]),
        ]:
            for name in names:
                await create_in(client, receiver, tenant, name)
        await dead_letter_in(client, receiver, "billing", "crm-push")

    page = await new_page(viewport=VIEWPORT, **login(WRITER))
    await page.goto(app.url("/ui/schedules?tenant=billing"))
    for path, name in [
        ("/ui/tenants?tenant=billing", "console-tenants.png"),
        ("/ui/tenants/billing?tenant=billing", "console-tenant.png"),
    ]:
        await page.goto(app.url(path))
        await expect(page.locator("main h1")).to_be_visible()
        picture = folder / name
        await page.screenshot(path=str(picture))
        assert picture.stat().st_size > 10_000
    assert page_log.off_host() == []
    assert page_log.errors == []
