"""The operator console in a browser: logging in with a key, filtering, opening a schedule,
pausing it, replaying a dead letter until it is delivered, a read key's view, and the three
pages as screenshots (written to $CHRONOQ_CONSOLE_SCREENSHOTS when set, as docs/ holds)."""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Page, expect

from tests.browser.live import LiveApp, PageLog
from tests.receiver import Receiver, Reply

WRITER = "0123456789abcdef-console-writer"
READER = "0123456789abcdef-console-reader"
KEYS = f"ops:{WRITER},dash.board:{READER}:read"
VIEWPORT = {"width": 1280, "height": 800}


def login(key: str) -> dict[str, Any]:
    """Context options for a browser whose user answers the login prompt with `key` (HTTP
    Basic, any user name): the browser sends it once the service's 401 asks for it."""
    return {"http_credentials": {"username": "operator", "password": key}}


NewPage = Callable[..., Awaitable[Page]]


@asynccontextmanager
async def api(app: LiveApp, key: str = WRITER) -> AsyncIterator[httpx.AsyncClient]:
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=app.base_url, headers=headers, timeout=10) as client:
        yield client


async def create(client: httpx.AsyncClient, receiver: Receiver, **spec: Any) -> dict[str, Any]:
    body = {
        "event_type": "report.due",
        "payload": {"report": "daily"},
        "target": {"type": "webhook", "url": receiver.url("/hook")},
        "trigger": {"type": "cron", "expression": "0 6 * * *", "timezone": "Europe/Paris"},
        **spec,
    }
    response = await client.post("/v1/schedules", json=body)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


async def dead_letter(
    client: httpx.AsyncClient,
    receiver: Receiver,
    name: str = "invoice-sync",
    event_type: str = "invoice.sync",
    reply: Reply | None = None,
) -> dict[str, Any]:
    """A schedule whose one attempt fails, once the running app's worker dead-lettered it."""
    path = f"/{name}"
    receiver.script(path, reply or Reply(status=503, body="upstream down"))
    before = len((await client.get("/v1/dead-letters")).json()["items"])
    created = await create(
        client,
        receiver,
        name=name,
        event_type=event_type,
        target={"type": "webhook", "url": receiver.url(path)},
        trigger={"type": "immediate"},
        max_attempts=1,
    )
    await receiver.wait_for(1, path)
    for _ in range(200):
        listed = (await client.get("/v1/dead-letters")).json()["items"]
        if len(listed) > before:
            return created
        await asyncio.sleep(0.05)
    raise AssertionError("the schedule was not dead-lettered")


async def test_a_key_logs_in_and_without_one_the_console_is_closed(
    serve_app: Callable[..., LiveApp], new_page: NewPage
) -> None:
    app = serve_app(api_keys=KEYS)
    anonymous = await new_page()
    # The 401 asks for Basic credentials: a browser prompts for them, and a headless one,
    # with none to give, gives up on the page.
    with pytest.raises(PlaywrightError, match="ERR_INVALID_AUTH_CREDENTIALS"):
        await anonymous.goto(app.url("/ui"))
    async with httpx.AsyncClient(trust_env=False) as client:
        closed = await client.get(app.url("/ui"))
    assert closed.status_code == 401
    assert 'Basic realm="chronoq"' in closed.headers.get_list("www-authenticate")

    page = await new_page(**login(WRITER))
    opened = await page.goto(app.url("/ui"))
    assert opened is not None
    assert opened.status == 200
    await expect(page.locator("header .who")).to_contain_text("ops")


async def test_filter_open_a_schedule_and_pause_it(
    serve_app: Callable[..., LiveApp], new_page: NewPage, page_log: PageLog
) -> None:
    app = serve_app(api_keys=KEYS)
    async with Receiver() as receiver, api(app) as client:
        wanted = await create(client, receiver, name="nightly-report", labels={"team": "blue"})
        await create(client, receiver, name="hourly-sync", event_type="sync.run")
        await create(client, receiver, name="red-report", labels={"team": "red"})

    page = await new_page(viewport=VIEWPORT, **login(WRITER))
    await page.goto(app.url("/ui/schedules"))
    await expect(page.locator("#schedules tbody tr")).to_have_count(3)

    await page.fill('input[name="event_type"]', "report.due")
    await page.fill('input[name="label"]', "team:blue")
    await page.click("text=Filter")
    await expect(page.locator("#schedules tbody tr")).to_have_count(1)
    assert "label=team%3Ablue" in page.url

    await page.click("text=nightly-report")
    await expect(page.locator("h1")).to_contain_text("nightly-report")
    await expect(page.locator("#status")).to_have_text("pending")
    await expect(page.locator("ol.upcoming li")).to_have_count(10)

    await page.click("button:has-text('Pause')")
    await expect(page.locator("#status")).to_have_text("paused")
    await expect(page.locator("p.notice")).to_contain_text("Paused")
    assert page.url.endswith(f"/ui/schedules/{wanted['id']}?done=paused")
    await expect(page.locator("button:has-text('Resume')")).to_be_visible()
    assert page_log.off_host() == []
    assert page_log.errors == []


async def test_buttons_work_with_javascript_off(
    serve_app: Callable[..., LiveApp], new_page: NewPage
) -> None:
    app = serve_app(api_keys=KEYS)
    async with Receiver() as receiver, api(app) as client:
        created = await create(client, receiver, name="plain-forms")
    page = await new_page(java_script_enabled=False, **login(WRITER))
    await page.goto(app.url(f"/ui/schedules/{created['id']}"))
    await page.click("button:has-text('Pause')")
    await expect(page.locator("#status")).to_have_text("paused")
    await page.click("button:has-text('Resume')")
    await expect(page.locator("#status")).to_have_text("pending")


async def test_replay_a_dead_letter_and_see_it_delivered(
    serve_app: Callable[..., LiveApp], new_page: NewPage, page_log: PageLog
) -> None:
    app = serve_app(api_keys=KEYS, worker_enabled=True)
    async with Receiver() as receiver, api(app) as client:
        created = await dead_letter(client, receiver)
        page = await new_page(viewport=VIEWPORT, **login(WRITER))
        await page.goto(app.url("/ui/dead-letters"))
        rows = page.locator("#dead-letters tbody tr")
        await expect(rows).to_have_count(1)
        await expect(rows.first).to_contain_text("invoice.sync")

        await rows.first.locator("button:has-text('Replay')").click()
        await expect(page.locator("p.notice")).to_contain_text("1 dead letter replayed")
        await expect(page.locator("#dead-letters tbody tr td.empty")).to_be_visible()
        await receiver.wait_for(2, "/invoice-sync")
        # Received is not yet recorded: the page shows what is stored when it loads.
        for _ in range(200):
            schedule = (await client.get(f"/v1/schedules/{created['id']}")).json()
            if schedule["status"] == "completed":
                break
            await asyncio.sleep(0.05)

        await page.goto(app.url(f"/ui/schedules/{created['id']}"))
        occurrence = page.locator("#occurrences tbody tr").first
        await expect(occurrence).to_contain_text("delivered")
        await expect(page.locator("#status")).to_have_text("completed")
    assert page_log.off_host() == []


async def test_a_read_key_sees_no_buttons(
    serve_app: Callable[..., LiveApp], new_page: NewPage
) -> None:
    app = serve_app(api_keys=KEYS, worker_enabled=True)
    async with Receiver() as receiver, api(app) as client:
        created = await create(client, receiver, name="watched")
        await dead_letter(client, receiver)
    page = await new_page(**login(READER))
    await page.goto(app.url(f"/ui/schedules/{created['id']}"))
    await expect(page.locator("header .who")).to_contain_text("dash.board (read)")
    await expect(page.locator("#status")).to_have_text("pending")
    assert await page.locator("form[method='post']").count() == 0
    # The header's tenant switcher only reads; the page itself has no button.
    assert await page.locator("main button").count() == 0

    await page.goto(app.url("/ui/dead-letters"))
    await expect(page.locator("#dead-letters tbody tr")).to_have_count(1)
    assert await page.locator("form[method='post']").count() == 0
    assert await page.locator("input[type='checkbox']").count() == 0
    # The only buttons are the filter form's and the header's search and tenant switcher,
    # which read.
    assert await page.locator("main button").all_inner_texts() == ["Filter"]
    assert await page.locator("header button").all_inner_texts() == ["Find", "Switch"]


async def test_the_three_pages_at_1280_by_800(
    serve_app: Callable[..., LiveApp], new_page: NewPage, page_log: PageLog, tmp_path: Path
) -> None:
    """Screenshots of the pages with some data; `CHRONOQ_CONSOLE_SCREENSHOTS=docs` writes
    them where docs/operator-console.md (and the README) link them."""
    folder = Path(os.environ.get("CHRONOQ_CONSOLE_SCREENSHOTS") or tmp_path)
    app = serve_app(api_keys=KEYS, worker_enabled=True)
    async with Receiver() as receiver, api(app) as client:
        shown = await create(
            client,
            receiver,
            name="nightly-report",
            labels={"team": "billing", "env": "prod"},
            target={
                "type": "webhook",
                "url": receiver.url("/hook"),
                "headers": {"Authorization": "Bearer not-shown-anywhere"},
            },
        )
        for name, kind, labels in [
            ("hourly-sync", "sync.run", {"team": "platform"}),
            ("weekly-digest", "digest.send", {"team": "growth"}),
            ("cleanup", "cleanup.run", {"team": "platform", "env": "staging"}),
        ]:
            await create(
                client,
                receiver,
                name=name,
                event_type=kind,
                labels=labels,
                trigger={"type": "interval", "every_seconds": 3600},
            )
        # One delivery needs a second attempt: the page shows both.
        receiver.script("/hook", Reply(status=502, body="bad gateway"))
        for _ in range(3):
            await client.post(f"/v1/schedules/{shown['id']}/trigger")
        await receiver.wait_for(4, "/hook")
        await dead_letter(client, receiver)
        await dead_letter(
            client, receiver, "crm-push", "crm.contact.updated", Reply(410, body="gone")
        )
        await dead_letter(
            client, receiver, "ledger-export", "ledger.export", Reply(422, body="bad period")
        )
        paused = await create(client, receiver, name="quarterly-close", event_type="ledger.close")
        await client.post(f"/v1/schedules/{paused['id']}/pause")

    page = await new_page(viewport=VIEWPORT, **login(WRITER))
    for path, name in [
        ("/ui/schedules", "console-schedules.png"),
        (f"/ui/schedules/{shown['id']}", "console-schedule.png"),
        ("/ui/dead-letters", "console-dead-letters.png"),
    ]:
        await page.goto(app.url(path))
        await expect(page.locator("main h1")).to_be_visible()
        picture = folder / name
        await page.screenshot(path=str(picture))
        assert picture.stat().st_size > 10_000
    assert "not-shown-anywhere" not in await page.content()
    assert page_log.off_host() == []
    assert page_log.errors == []


async def test_the_header_numbers_refresh_in_place(
    serve_app: Callable[..., LiveApp], new_page: NewPage, page_log: PageLog
) -> None:
    app = serve_app(api_keys=KEYS)
    page = await new_page(**login(WRITER))
    await page.goto(app.url("/ui/schedules"))
    async with page.expect_response(app.url("/ui/live")) as refreshed:
        pass
    assert (await refreshed.value).status == 200
    await expect(page.locator("#live dt").first).to_have_text("delivered/s")
    assert page_log.errors == []


async def test_the_headers_search_goes_from_an_occurrence_id_to_its_row(
    serve_app: Callable[..., LiveApp], new_page: NewPage
) -> None:
    app = serve_app(api_keys=KEYS)
    async with Receiver() as receiver, api(app) as client:
        created = await create(client, receiver, name="searched")
    page = await new_page(**login(READER))
    await page.goto(app.url("/ui/dead-letters"))
    await page.locator("#find input[name='id']").fill(created["next_occurrence_id"])
    await page.locator("#find button").click()
    await expect(page).to_have_url(re.compile(rf"/ui/schedules/{created['id']}\?"))
    await expect(page.locator("tr:target")).to_have_id(f"o-{created['next_occurrence_id']}")
