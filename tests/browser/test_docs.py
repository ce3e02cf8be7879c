"""/docs and /redoc render in a browser with every request answered by the service itself."""

from __future__ import annotations

from collections.abc import Callable

from playwright.async_api import Page

from tests.browser.live import LiveApp, PageLog

# API keys are set: the pages still render for a browser that has none (DESIGN 8).
KEYS = "ops:0123456789abcdef-writer"
# Swagger UI and ReDoc lay the whole document out in the page's script, the heaviest work of
# any page here: with the suite's other workers on the same two cores it has taken over the
# 10 s the other pages get.
RENDER_MS = 30_000


def assert_all_local(page_log: PageLog, app: LiveApp, *expected: str) -> None:
    assert page_log.off_host() == []
    for path in expected:
        assert app.url(path) in page_log.requests
    assert page_log.errors == []


async def test_swagger_ui_renders_the_api_from_local_assets(
    serve_app: Callable[..., LiveApp], page: Page, page_log: PageLog
) -> None:
    app = serve_app(api_keys=KEYS)
    page.set_default_timeout(RENDER_MS)

    await page.goto(app.url("/docs"))
    operation = page.locator("#operations-schedules-create_schedule")
    await operation.wait_for(state="visible")
    await page.wait_for_load_state("networkidle")

    assert "/v1/schedules" in await operation.inner_text()
    assert await page.locator(".opblock").count() > 10
    assert_all_local(
        page_log,
        app,
        "/docs",
        "/docs/assets/swagger-ui/swagger-ui-bundle.js",
        "/docs/assets/swagger-ui/swagger-ui.css",
        "/openapi.json",
    )


async def test_redoc_renders_the_api_from_local_assets(
    serve_app: Callable[..., LiveApp], page: Page, page_log: PageLog
) -> None:
    app = serve_app(api_keys=KEYS)
    page.set_default_timeout(RENDER_MS)

    await page.goto(app.url("/redoc"))
    await page.locator("h1", has_text="Chronoq").wait_for(state="visible")
    await page.get_by_role("heading", name="Create Schedule").first.wait_for(state="visible")
    await page.wait_for_load_state("networkidle")

    operation = page.locator('[data-section-id="tag/schedules/operation/create_schedule"]')
    assert "POST /v1/schedules" in " ".join((await operation.inner_text()).split())
    assert_all_local(
        page_log, app, "/redoc", "/docs/assets/redoc/redoc.standalone.js", "/openapi.json"
    )
