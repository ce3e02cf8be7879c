"""/docs and /redoc come with their assets from the service, open without a key."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.api import docs

KEYS = "ops:0123456789abcdef-writer"
ASSETS = {
    "/docs/assets/swagger-ui/swagger-ui-bundle.js": "text/javascript",
    "/docs/assets/swagger-ui/swagger-ui.css": "text/css",
    "/docs/assets/swagger-ui/favicon-32x32.png": "image/png",
    "/docs/assets/redoc/redoc.standalone.js": "text/javascript",
    "/docs/assets/redoc/LICENSE": "",
    "/docs/assets/redoc/VERSION": "",
}

# Every store serves the same pages: one is enough.
SQLITE = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


@SQLITE
async def test_with_keys_set_the_assets_answer_without_one(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(api_keys=KEYS) as h:
        for path, media_type in ASSETS.items():
            response = await h.client.get(path)
            assert response.status_code == 200, (path, response.text)
            assert response.headers["content-type"].startswith(media_type), path
            assert response.content, path
        assert (await h.client.get("/v1/schedules")).status_code == 401


@SQLITE
@pytest.mark.parametrize("page", ["/docs", "/redoc"])
async def test_the_pages_name_no_address_but_the_services_own(
    make_harness: Callable[..., Any], page: str
) -> None:
    async with make_harness(api_keys=KEYS) as h:
        response = await h.client.get(page)
        assert response.status_code == 200
        html = response.text

    addresses = re.findall(r'(?:src|href|spec-url)="([^"]*)"', html) + re.findall(
        r"url: '([^']*)'", html
    )
    assert len(addresses) >= 3
    assert all(address.startswith("/") and not address.startswith("//") for address in addresses)
    assert "http://" not in html
    assert "https://" not in html
    for address in addresses:
        if address.startswith(docs.ASSETS):
            assert address in ASSETS


@SQLITE
@pytest.mark.parametrize(
    "path",
    [
        "/docs/assets/swagger-ui/__init__.py",
        "/docs/assets/swagger-ui/main.py",
        "/docs/assets/swagger-ui/__pycache__",
        "/docs/assets/redoc/",
        "/docs/assets/redoc/missing.js",
    ],
)
async def test_only_the_assets_are_served_from_their_directories(
    make_harness: Callable[..., Any], path: str
) -> None:
    async with make_harness() as h:
        assert (await h.client.get(path)).status_code == 404


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
async def test_behind_a_proxy_prefix_every_address_carries_it(page: str) -> None:
    app = FastAPI(docs_url=None, redoc_url=None)
    docs.install(app)
    transport = httpx.ASGITransport(app=app, root_path="/chronoq")
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        html = (await client.get(f"/chronoq{page}")).text
        addresses = re.findall(r'(?:src|href|spec-url)="([^"]*)"|url: \'([^\']*)\'', html)
        paths = [next(a for a in found if a) for found in addresses]
        assert len(paths) >= 3
        assert all(path.startswith("/chronoq/") for path in paths), paths
        for path in paths:
            assert (await client.get(path)).status_code == 200, path


def test_the_vendored_redoc_is_the_one_its_version_file_records() -> None:
    record = dict(
        line.split(": ", 1)
        for line in (docs.REDOC_DIRECTORY / "VERSION").read_text(encoding="utf-8").splitlines()
    )
    bundle = (docs.REDOC_DIRECTORY / "redoc.standalone.js").read_bytes()

    assert record["package"] == "redoc"
    assert hashlib.sha256(bundle).hexdigest() == record["sha256"]
    assert b"cdn.redoc.ly" not in bundle
