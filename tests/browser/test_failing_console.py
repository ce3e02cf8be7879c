"""Finding and fixing a failing schedule in the console, in Chromium: the failing view shows
it with its badge and last error, its page replays the dead letter, and the edit form
changes its target, max attempts and labels under If-Match, refusing a stale form."""

from __future__ import annotations

from collections.abc import Callable

from playwright.async_api import expect

from tests.browser.live import LiveApp, PageLog
from tests.browser.test_console import KEYS, VIEWPORT, WRITER, NewPage, api, create, login
from tests.receiver import Receiver, Reply
from tests.waiting import eventually


async def test_an_operator_finds_a_failing_schedule_and_replays_its_dead_letter(
    serve_app: Callable[..., LiveApp], new_page: NewPage, page_log: PageLog
) -> None:
    app = serve_app(api_keys=KEYS, worker_enabled=True)
    async with Receiver() as receiver, api(app) as client:
        receiver.always("/sync", Reply(status=503, body="upstream down"))
        broken = await create(
            client,
            receiver,
            name="hourly-sync",
            target={"type": "webhook", "url": receiver.url("/sync")},
            trigger={"type": "interval", "every_seconds": 3600},
            max_attempts=1,
        )
        await create(client, receiver, name="healthy")

        async def dead_lettered() -> bool:
            return bool((await client.get("/v1/dead-letters")).json()["items"])

        await eventually(dead_lettered, what="the schedule dead-lettered")

        page = await new_page(viewport=VIEWPORT, **login(WRITER))
        await page.goto(app.url("/ui/schedules"))
        await page.click("#view-failing")
        rows = page.locator("#schedules tbody tr")
        await expect(rows).to_have_count(1)
        await expect(rows.first.locator("td.state")).to_contain_text("pending")
        await expect(rows.first.locator(".status-failing")).to_have_text("failing \u00d71")
        await expect(rows.first.locator("td.last-error")).to_contain_text("HTTP 503")

        await rows.first.locator("text=hourly-sync").click()
        await expect(page.locator("#failing")).to_have_text("failing \u00d71")
        receiver.always("/sync", Reply(status=200))
        replay = page.locator("#occurrences button:has-text('Replay')")
        await expect(replay).to_have_count(1)
        await replay.click()
        await expect(page.locator("p.notice")).to_contain_text("Replayed: the dead letter is due")
        await receiver.wait_for(2, "/sync")

        async def delivered() -> bool:
            found = await client.get(f"/v1/schedules/{broken['id']}")
            return bool(found.json()["consecutive_failures"] == 0)

        await eventually(delivered, what="the replay delivered")
        await page.reload()
        await expect(page.locator("#failing")).to_have_count(0)
        await expect(page.locator("#occurrences button:has-text('Replay')")).to_have_count(0)
    assert page_log.off_host() == []
    assert page_log.errors == []


async def test_the_edit_form_saves_and_a_stale_one_is_refused(
    serve_app: Callable[..., LiveApp], new_page: NewPage, page_log: PageLog
) -> None:
    app = serve_app(api_keys=KEYS)
    async with Receiver() as receiver, api(app) as client:
        created = await create(client, receiver, name="nightly", labels={"team": "blue"})
        page = await new_page(viewport=VIEWPORT, **login(WRITER))
        await page.goto(app.url(f"/ui/schedules/{created['id']}"))

        await page.fill("#edit-target-url", receiver.url("/moved"))
        await page.fill("#edit-max-attempts", "4")
        await page.fill("#edit-labels", "team:red\nowner:ops")
        await page.click("button:has-text('Save changes')")
        await expect(page.locator("p.notice")).to_have_text("Saved.")
        await expect(page.locator("#target")).to_contain_text("/moved")
        await expect(page.locator("#labels")).to_contain_text("owner:ops")
        saved = (await client.get(f"/v1/schedules/{created['id']}")).json()
        assert (saved["max_attempts"], saved["labels"]) == (4, {"owner": "ops", "team": "red"})

        # Someone else changes it while the form is open: the form's save is refused.
        patched = await client.patch(f"/v1/schedules/{created['id']}", json={"max_attempts": 9})
        assert patched.status_code == 200, patched.text
        await page.fill("#edit-max-attempts", "2")
        await page.click("button:has-text('Save changes')")
        await expect(page.locator("#form-error")).to_contain_text("changed since you loaded it")
        await expect(page.locator("#edit-max-attempts")).to_have_value("9")
        now = (await client.get(f"/v1/schedules/{created['id']}")).json()
        assert (now["max_attempts"], now["version"]) == (9, saved["version"] + 1)
    assert page_log.off_host() == []
    conflict = "the server responded with a status of 409 (Conflict)"
    assert page_log.errors == [f"console: Failed to load resource: {conflict}"]
