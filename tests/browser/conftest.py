"""Browser tests: headless Chromium (Debian's, /usr/bin/chromium) driven by Playwright's
async API against the app served for real on 127.0.0.1.

The fixtures, for any page of the service:

- `browser`: one Chromium for the whole run (under pytest-xdist every browser case runs on
  one worker: tests/conftest.py, `lane`). Missing Chromium skips the test (a failure
  under CHRONOQ_REQUIRE_SERVICES=1). Playwright's own browser builds are never used.
- `serve_app(**overrides)`: serves the app on a free 127.0.0.1 port with settings from
  `tests.conftest.make_settings` on a fresh, migrated SQLite database, `overrides` on top
  (`api_keys="ops:<key>,viewer:<key>:read"`, `worker_enabled=True`, ...; `resolver=` stands
  in for DNS). Returns a started `LiveApp` (`.base_url`, `.url(path)`, `.settings`); every
  app it served is stopped at teardown. `live_app` is `serve_app()`: no keys, worker off.
- `new_page(**context_options)`: a page in a browser context of its own, so cookies and
  credentials never leak between pages or tests; the options are Playwright's
  `Browser.new_context` ones (`http_credentials={"username": ..., "password": <key>}`
  to log in as a browser does, answering the 401's Basic challenge;
  `java_script_enabled=False`, `viewport=...`).
  Actions and waits time out after 10 s. Closed at teardown. `page` is `new_page()`.
- `page_log`: a `PageLog` of every page of the test's `new_page` (popups included):
  `requests` (every URL asked for, in order, sub-resources and redirects included),
  `errors` (uncaught exceptions and console errors) and `off_host()` (the requests that
  went anywhere but 127.0.0.1).

Every async test under tests/browser/ runs on the session's event loop, the one the browser
lives on (see pytest_collection_modifyitems below): no marker is needed in the test modules,
but an async fixture of their own that awaits the browser or a page needs
`@pytest_asyncio.fixture(loop_scope="session")`. The app's server runs on a loop of its own,
so a test seeds data over HTTP (`httpx.AsyncClient(base_url=app.base_url)`) while it waits.
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from playwright.async_api import Browser, BrowserContext, Page, async_playwright
from pytest_asyncio import is_async_test

from app.service.addresses import HostResolver
from tests.browser.live import LiveApp, PageLog
from tests.conftest import make_settings, service_missing

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    # Straight to the local service, whatever proxy the environment names.
    "--no-proxy-server",
]
TIMEOUT_MS = 10_000
_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run this directory's async tests on the session's loop, where `browser` lives."""
    on_session_loop = pytest.mark.asyncio(loop_scope="session")
    for item in items:
        if is_async_test(item) and _HERE in Path(str(item.path)).parents:
            item.add_marker(on_session_loop, append=False)


@pytest.fixture(scope="session")
def chromium() -> Path:
    if not CHROMIUM.exists():
        service_missing("Chromium", f"{CHROMIUM} is missing (apt-get install chromium)")
    return CHROMIUM


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def browser(chromium: Path) -> AsyncIterator[Browser]:
    """Headless Chromium, launched once per run."""
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=chromium, args=CHROMIUM_ARGS, headless=True
        )
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture
def page_log() -> PageLog:
    """Filled by the pages of `new_page` (and so `page`)."""
    return PageLog()


@pytest_asyncio.fixture(loop_scope="session")
async def new_page(
    browser: Browser, page_log: PageLog
) -> AsyncIterator[Callable[..., Awaitable[Page]]]:
    """`await new_page(**context_options)`: a page in a fresh context, logged in `page_log`."""
    contexts: list[BrowserContext] = []

    async def make(**context_options: Any) -> Page:
        context = await browser.new_context(**context_options)
        contexts.append(context)
        context.set_default_timeout(TIMEOUT_MS)
        page_log.watch(context)
        return await context.new_page()

    try:
        yield make
    finally:
        for context in contexts:
            await context.close()


@pytest_asyncio.fixture(loop_scope="session")
async def page(new_page: Callable[..., Awaitable[Page]]) -> Page:
    return await new_page()


@pytest.fixture
def serve_app(tmp_path: Path, sqlite_template: Path) -> Iterator[Callable[..., LiveApp]]:
    """`serve_app(**setting_overrides, resolver=None)`: the app, started, on its own SQLite."""
    served: list[LiveApp] = []

    def serve(resolver: HostResolver | None = None, **overrides: Any) -> LiveApp:
        path = tmp_path / f"live-{len(served)}.db"
        shutil.copy(sqlite_template, path)
        app = LiveApp(make_settings(f"sqlite:///{path}", **overrides), resolver=resolver)
        served.append(app)
        app.start()
        return app

    try:
        yield serve
    finally:
        for app in reversed(served):
            app.stop()


@pytest.fixture
def live_app(serve_app: Callable[..., LiveApp]) -> LiveApp:
    return serve_app()
