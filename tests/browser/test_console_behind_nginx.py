"""The console through the shipped balancer: deploy/nginx.conf, rendered for a local nginx on
a free 127.0.0.1 port (tests/nginx.py), in front of a live replica with API keys. Chromium
logs in with HTTP Basic and every button of a schedule and a dead letter takes effect; and a
form posted as an older browser does (an Origin, no fetch metadata) is compared with the Host
nginx passes, port included, where the balancer as it used to be (`Host $host`) made every
change another site's."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from playwright.async_api import Dialog, Response, expect

from tests.browser.live import LiveApp, PageLog
from tests.browser.test_console import KEYS, WRITER, NewPage, create, dead_letter, login
from tests.nginx import NGINX_CONF, Nginx, find_nginx, start_nginx
from tests.receiver import Receiver
from tests.waiting import eventually


@pytest.fixture
def nginx_binary() -> str:
    return find_nginx()


@pytest.fixture
def replica(serve_app: Callable[..., LiveApp]) -> LiveApp:
    """One replica with keys and its delivery loop (a dead letter needs one)."""
    return serve_app(api_keys=KEYS, worker_enabled=True)


def without_fetch_metadata(text: str) -> str:
    """deploy/nginx.conf that drops the Sec-Fetch-Site header on its way to the replica: the
    console as a browser without fetch metadata (Safari before 16.4) uses it, its Origin
    alone saying where the page is. (Chromium adds the header after any interception a test
    could make.)"""
    forwarded = "            proxy_set_header X-Forwarded-Proto $scheme;\n"
    assert text.count(forwarded) == 1
    return text.replace(forwarded, forwarded + '            proxy_set_header Sec-Fetch-Site "";\n')


@pytest_asyncio.fixture(
    loop_scope="session", params=["as-shipped", "origin-only"], ids=["as-shipped", "origin-only"]
)
async def balancer(
    request: pytest.FixtureRequest, nginx_binary: str, replica: LiveApp, tmp_path: Path
) -> AsyncIterator[Nginx]:
    """deploy/nginx.conf in front of `replica`, serving: as shipped, and dropping fetch
    metadata (`without_fetch_metadata`)."""
    source = NGINX_CONF
    if request.param == "origin-only":
        source = tmp_path / "nginx-origin-only.conf"
        text = without_fetch_metadata(NGINX_CONF.read_text(encoding="utf-8"))
        source.write_text(text, encoding="utf-8")
    nginx = start_nginx(nginx_binary, [replica.port], tmp_path / "nginx", source)
    try:
        await nginx.wait_serving(timeout=15.0)
        yield nginx
    finally:
        nginx.stop()


def api(base_url: str) -> httpx.AsyncClient:
    """A client of the API with the write key as a Bearer token."""
    return httpx.AsyncClient(
        base_url=base_url,
        headers={"Authorization": f"Bearer {WRITER}"},
        timeout=10,
        trust_env=False,
    )


def browser_like(base_url: str) -> httpx.AsyncClient:
    """What an older browser sends with a console form: HTTP Basic and the page's Origin,
    and no fetch metadata (Sec-Fetch-Site: same-origin would vouch for the page by itself)."""
    return httpx.AsyncClient(
        base_url=base_url,
        auth=httpx.BasicAuth("operator", WRITER),
        headers={"Origin": base_url},
        timeout=10,
        trust_env=False,
    )


async def status_of(client: httpx.AsyncClient, schedule_id: str) -> str:
    status: str = (await client.get(f"/v1/schedules/{schedule_id}")).json()["status"]
    return status


async def test_every_console_button_works_through_the_shipped_nginx(
    replica: LiveApp, balancer: Nginx, new_page: NewPage, page_log: PageLog
) -> None:
    async with Receiver() as receiver, api(balancer.base_url) as client:
        created = await create(client, receiver, name="behind-nginx")
        schedule_id = created["id"]
        failed = await dead_letter(client, receiver)

        page = await new_page(**login(WRITER))
        posted: list[Response] = []
        page.on("response", lambda r: posted.append(r) if r.request.method == "POST" else None)

        async def accept(dialog: Dialog) -> None:
            await dialog.accept()  # Cancel asks first

        page.on("dialog", accept)
        opened = await page.goto(balancer.base_url + f"/ui/schedules/{schedule_id}")
        assert opened is not None
        assert opened.status == 200
        await expect(page.locator("#status")).to_have_text("pending")

        await page.click("button:has-text('Pause')")
        await expect(page.locator("#status")).to_have_text("paused")
        assert await status_of(client, schedule_id) == "paused"

        await page.click("button:has-text('Resume')")
        await expect(page.locator("#status")).to_have_text("pending")
        assert await status_of(client, schedule_id) == "pending"

        await page.click("button:has-text('Trigger')")
        await expect(page.locator("p.notice")).to_contain_text("Triggered")
        events = (await client.get(f"/v1/schedules/{schedule_id}/events")).json()["items"]
        assert [e["kind"] for e in events] == ["created", "paused", "resumed", "triggered"]
        assert all(e["actor"] == "ops" for e in events[1:])

        await page.click("button:has-text('Cancel')")
        await expect(page.locator("#status")).to_have_text("cancelled")
        assert await status_of(client, schedule_id) == "cancelled"

        await page.goto(balancer.base_url + "/ui/dead-letters")
        rows = page.locator("#dead-letters tbody tr")
        await expect(rows).to_have_count(1)
        await rows.first.locator("button:has-text('Replay')").click()
        await expect(page.locator("p.notice")).to_contain_text("1 dead letter replayed")
        await receiver.wait_for(2, "/invoice-sync")
        assert (await client.get("/v1/dead-letters")).json()["items"] == []

        async def delivered() -> bool:
            return await status_of(client, failed["id"]) == "completed"

        await eventually(delivered, what="the replayed schedule completed")

    # Each button was a form posted through nginx and answered with the console's redirect.
    assert [r.status for r in posted] == [303] * 5, [(r.url, r.status) for r in posted]
    assert all(r.url.startswith(balancer.base_url) for r in posted)
    log = (balancer.prefix / "access.log").read_text(encoding="utf-8")
    assert len(re.findall(r'"POST /ui/[^"]*" 303 ', log)) == 5, log
    assert " 403 " not in log
    assert page_log.errors == []
    assert page_log.off_host() == []


async def test_a_form_is_compared_with_the_host_nginx_passes_port_included(
    replica: LiveApp, balancer: Nginx
) -> None:
    async with (
        Receiver() as receiver,
        api(balancer.base_url) as client,
        browser_like(balancer.base_url) as browser,
    ):
        created = await create(client, receiver, name="older-browser")
        page = f"/ui/schedules/{created['id']}"
        token = re.search(r'name="token" value="([^"]+)"', (await browser.get(page)).text)
        assert token is not None

        done = await browser.post(f"{page}/pause", data={"token": token.group(1)})

        assert done.status_code == 303, done.text
        assert await status_of(client, created["id"]) == "paused"


async def test_the_balancer_as_it_was_refused_every_change_and_said_why(
    nginx_binary: str, replica: LiveApp, tmp_path: Path
) -> None:
    # deploy/nginx.conf with the Host it used to pass: the name without the browser's port.
    text = NGINX_CONF.read_text(encoding="utf-8")
    old, count = re.subn(r"\$chronoq_host;", "$host;", text)
    assert count == 2, "deploy/nginx.conf passes $chronoq_host as Host and X-Forwarded-Host"
    source = tmp_path / "nginx-host-without-port.conf"
    source.write_text(old, encoding="utf-8")
    nginx = start_nginx(nginx_binary, [replica.port], tmp_path / "nginx", source)
    try:
        await nginx.wait_serving(timeout=15.0)
        async with (
            Receiver() as receiver,
            api(nginx.base_url) as client,
            browser_like(nginx.base_url) as browser,
        ):
            created = await create(client, receiver, name="old-balancer")

            refused = await browser.post(f"/v1/schedules/{created['id']}/pause")

            assert refused.status_code == 403
            detail = refused.json()["detail"]
            assert f"Origin '{nginx.base_url}'" in detail
            assert "this service's origin is 'http://127.0.0.1'" in detail
            assert "proxy_set_header Host $http_host" in detail
            assert await status_of(client, created["id"]) == "pending"
    finally:
        nginx.stop()
