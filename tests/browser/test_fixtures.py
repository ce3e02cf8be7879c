"""The browser fixtures themselves: the served app, keys and credentials, the request log."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import httpx
import pytest
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Page

from tests.browser.live import LiveApp, PageLog, off_host

WRITER = "0123456789abcdef-writer"


async def test_a_page_with_credentials_reads_what_one_without_cannot(
    serve_app: Callable[..., LiveApp],
    new_page: Callable[..., Awaitable[Page]],
    page_log: PageLog,
) -> None:
    app = serve_app(api_keys=f"ops:{WRITER}")
    async with httpx.AsyncClient(base_url=app.base_url, trust_env=False) as client:
        created = await client.post(
            "/v1/schedules",
            headers={"Authorization": f"Bearer {WRITER}"},
            json={
                "name": "seeded",
                "event_type": "test.event",
                "target": {"type": "webhook", "url": "http://127.0.0.1:9/hook"},
                "trigger": {"type": "once", "delay_seconds": 3600},
            },
        )
        assert created.status_code == 201, created.text

    anonymous = await new_page()
    # Asked for credentials and given none, a headless browser gives up on the page.
    with pytest.raises(PlaywrightError, match="ERR_INVALID_AUTH_CREDENTIALS"):
        await anonymous.goto(app.url("/v1/schedules"))
    # The browser's own login: it answers the 401's Basic challenge with the credentials.
    operator = await new_page(http_credentials={"username": "ops", "password": WRITER})
    admitted = await operator.goto(app.url("/v1/schedules"))

    assert admitted is not None
    assert admitted.status == 200
    assert "seeded" in await operator.locator("body").inner_text()
    assert page_log.requests.count(app.url("/v1/schedules")) >= 2
    assert page_log.off_host() == []


def test_off_host_names_every_request_that_would_leave_the_machine() -> None:
    urls = [
        "http://127.0.0.1:8000/docs",
        "ws://127.0.0.1:8000/live",
        "data:image/png;base64,AAAA",
        "blob:http://127.0.0.1:8000/0f1e",
        "about:blank",
        "https://cdn.example.com/app.js",
        "http://localhost:8000/docs",
        "http://127.0.0.2/",
        "chrome-extension://abc/x.js",
    ]

    assert off_host(urls) == urls[5:]
