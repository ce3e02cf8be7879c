"""Who may use the console, and what keeps its forms from being posted by another site."""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import STORES
from tests.integration.conftest import Harness
from tests.integration.ui.pages import KEYS, READER, WRITER, basic, post_form, spec, token_of

pytestmark = pytest.mark.parametrize("database_url", STORES[:1], indirect=True)

PAGES = ["/ui", "/ui/schedules", "/ui/dead-letters", "/ui/static/console.css"]


@pytest.mark.parametrize("path", PAGES)
async def test_with_keys_set_the_console_asks_for_one_with_a_basic_challenge(
    make_harness: Callable[..., Any], path: str
) -> None:
    async with make_harness(api_keys=KEYS) as h:
        response = await h.client.get(path)
        assert response.status_code == 401
        assert 'Basic realm="chronoq"' in response.headers["www-authenticate"]
        assert (await h.client.get(path, headers=basic(WRITER))).status_code == 200


async def test_the_page_names_the_key_and_a_write_key_gets_the_buttons(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(api_keys=KEYS) as h:
        response = await h.client.post(
            "/v1/schedules", json=spec(h), headers={"Authorization": f"Bearer {WRITER}"}
        )
        created = response.json()
        page = f"/ui/schedules/{created['id']}"
        html = (await h.client.get(page, headers=basic(WRITER))).text
        assert "<b>ops</b>" in html
        assert f'action="{page}/pause"' in html
        done = await post_form(h, f"{page}/pause", {"token": token_of(html)}, basic(WRITER))
        assert done.status_code == 303


async def test_a_read_key_sees_no_forms_and_its_post_is_refused(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(api_keys=KEYS) as h:
        response = await h.client.post(
            "/v1/schedules", json=spec(h), headers={"Authorization": f"Bearer {WRITER}"}
        )
        created = response.json()
        page = f"/ui/schedules/{created['id']}"
        for path in (page, "/ui/schedules", "/ui/dead-letters"):
            html = (await h.client.get(path, headers=basic(READER))).text
            assert 'method="post"' not in html
            assert 'name="token"' not in html
            assert "(read)" in html
        writer_token = token_of((await h.client.get(page, headers=basic(WRITER))).text)
        refused = await post_form(h, f"{page}/pause", {"token": writer_token}, basic(READER))
        assert refused.status_code == 403
        status = await h.client.get(
            f"/v1/schedules/{created['id']}", headers={"Authorization": f"Bearer {READER}"}
        )
        assert status.json()["status"] == "pending"


async def test_a_token_is_bound_to_the_key_that_loaded_the_form(
    make_harness: Callable[..., Any],
) -> None:
    other = "0123456789abcdef-console-other"
    async with make_harness(api_keys=f"{KEYS},other:{other}") as h:
        response = await h.client.post(
            "/v1/schedules", json=spec(h), headers={"Authorization": f"Bearer {WRITER}"}
        )
        page = f"/ui/schedules/{response.json()['id']}"
        token = token_of((await h.client.get(page, headers=basic(other))).text)
        refused = await post_form(h, f"{page}/pause", {"token": token}, basic(WRITER))
        assert refused.status_code == 403
        assert "reload the page" in refused.text


async def test_a_post_without_a_valid_token_is_a_403_page_and_changes_nothing(
    harness: Harness,
) -> None:
    created = await harness.create(**spec(harness))
    page = f"/ui/schedules/{created['id']}"
    for fields in ({}, {"token": ""}, {"token": "1.abc"}, {"token": "not-a-token"}):
        response = await post_form(harness, f"{page}/pause", fields)
        assert response.status_code == 403
        assert response.headers["content-type"].startswith("text/html")
    assert await harness.schedule_status(created["id"]) == "pending"


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "https://evil.example"},
        {"Origin": "null"},
        {"Referer": "https://evil.example/page"},
        {"Origin": "http://localhost.evil.example"},
    ],
    ids=["origin", "null-origin", "referer", "look-alike"],
)
async def test_a_post_from_another_site_is_refused_even_with_a_token(
    harness: Harness, headers: dict[str, str]
) -> None:
    created = await harness.create(**spec(harness))
    page = f"/ui/schedules/{created['id']}"
    token = token_of((await harness.client.get(page)).text)
    response = await post_form(harness, f"{page}/pause", {"token": token}, headers, origin=None)
    assert response.status_code == 403
    assert await harness.schedule_status(created["id"]) == "pending"


async def test_a_post_that_is_not_a_form_is_refused(harness: Harness) -> None:
    created = await harness.create(**spec(harness))
    page = f"/ui/schedules/{created['id']}"
    token = token_of((await harness.client.get(page)).text)
    response = await harness.client.post(
        f"{page}/pause", content=f"token={token}", headers={"Content-Type": "text/plain"}
    )
    assert response.status_code == 403
    assert await harness.schedule_status(created["id"]) == "pending"


async def test_pages_are_never_framed_nor_cached(harness: Harness) -> None:
    response = await harness.client.get("/ui/schedules")
    assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["cache-control"] == "no-store"


async def test_a_form_from_another_origin_is_refused_with_what_was_compared(
    make_harness: Callable[..., Any],
) -> None:
    # With a Bearer key (no browser sends one by itself) the API lets the request through,
    # and the console's own check, the same one, refuses it with its page.
    bearer = {"Authorization": f"Bearer {WRITER}"}
    async with make_harness(api_keys=KEYS) as h:
        created = (await h.client.post("/v1/schedules", json=spec(h), headers=bearer)).json()
        page = f"/ui/schedules/{created['id']}"
        token = token_of((await h.client.get(page, headers=bearer)).text)

        refused = await post_form(
            h, f"{page}/pause", {"token": token}, bearer, origin="http://localhost:8080"
        )

        assert refused.status_code == 403
        assert refused.headers["content-type"].startswith("text/html")
        text = html.unescape(refused.text)
        assert "did not come from this console's address" in text
        assert "Origin 'http://localhost:8080'" in text
        assert "this service's origin is 'http://localhost'" in text
        assert "Reloading will not help" in text
        assert "proxy_set_header Host $http_host" in text
        assert "CHRONOQ_PUBLIC_ORIGIN" in text
        status = await h.client.get(f"/v1/schedules/{created['id']}", headers=bearer)
        assert status.json()["status"] == "pending"

        made = await post_form(h, f"{page}/pause", {"token": token}, bearer)
        assert made.status_code == 303


async def test_a_basic_form_from_another_origin_gets_the_consoles_page_not_json(
    make_harness: Callable[..., Any],
) -> None:
    # A browser logged in with HTTP Basic is refused by the key check before the console
    # sees the form: the refusal is still the console's page, saying what was compared.
    async with make_harness(api_keys=KEYS) as h:
        bearer = {"Authorization": f"Bearer {WRITER}"}
        created = (await h.client.post("/v1/schedules", json=spec(h), headers=bearer)).json()
        page = f"/ui/schedules/{created['id']}"
        token = token_of((await h.client.get(page, headers=basic(WRITER))).text)

        refused = await post_form(
            h, f"{page}/pause", {"token": token}, basic(WRITER), origin="http://localhost:8080"
        )

        assert refused.status_code == 403
        assert refused.headers["content-type"].startswith("text/html")
        assert "default-src 'none'" in refused.headers["content-security-policy"]
        text = html.unescape(refused.text)
        assert "did not come from this console's address" in text
        assert "Origin 'http://localhost:8080'" in text
        assert "Reloading will not help" in text
        assert 'href="/ui/schedules"' in text
        status = await h.client.get(f"/v1/schedules/{created['id']}", headers=bearer)
        assert status.json()["status"] == "pending"
        # The API's own routes still answer a problem.
        api = await h.client.post(
            f"/v1/schedules/{created['id']}/pause",
            headers={**basic(WRITER), "Origin": "http://localhost:8080"},
        )
        assert api.status_code == 403
        assert api.headers["content-type"] == "application/problem+json"


async def test_a_form_from_the_public_origin_is_accepted(make_harness: Callable[..., Any]) -> None:
    public = "https://chronoq.example.com"
    async with make_harness(api_keys=KEYS, public_origin=public) as h:
        response = await h.client.post(
            "/v1/schedules", json=spec(h), headers={"Authorization": f"Bearer {WRITER}"}
        )
        page = f"/ui/schedules/{response.json()['id']}"
        token = token_of((await h.client.get(page, headers=basic(WRITER))).text)

        done = await post_form(h, f"{page}/pause", {"token": token}, basic(WRITER), origin=public)

        assert done.status_code == 303, done.text
