"""The API's documentation pages, /docs (Swagger UI) and /redoc, with every asset served here.

FastAPI's own pages load their scripts, styles, favicon and fonts from CDNs, so they stay blank
wherever the service cannot reach the internet. These pages load everything from /docs/assets/:
Swagger UI from the `fastapi-swagger` distribution (which follows Swagger UI's releases), and
ReDoc's standalone bundle vendored from the npm package `redoc` under static/redoc/, whose
VERSION file says which release it is. Like the pages, the assets need no API key
(auth.OPEN_PREFIXES holds /docs/).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS = "/docs/assets"
SWAGGER_UI_ASSETS = f"{ASSETS}/swagger-ui"
REDOC_ASSETS = f"{ASSETS}/redoc"
OAUTH2_REDIRECT = "/docs/oauth2-redirect"

SWAGGER_UI_FILES = frozenset({"swagger-ui-bundle.js", "swagger-ui.css", "favicon-32x32.png"})
REDOC_FILES = frozenset(
    {"redoc.standalone.js", "redoc.standalone.js.LICENSE.txt", "LICENSE", "VERSION"}
)
REDOC_DIRECTORY = Path(__file__).parent / "static" / "redoc"

_FAVICON = f"{SWAGGER_UI_ASSETS}/favicon-32x32.png"
# Swagger UI's badge would send the document to the public online validator.
_SWAGGER_UI_PARAMETERS: dict[str, Any] = {"validatorUrl": None}


class _Files(StaticFiles):
    """The named files of a directory and nothing else: a package's directory also holds its
    __init__.py and __pycache__, which are not assets."""

    def __init__(self, names: frozenset[str], **where: Any) -> None:
        super().__init__(**where)
        self._names = names

    def lookup_path(self, path: str) -> tuple[str, os.stat_result | None]:
        if path not in self._names:
            return "", None
        return super().lookup_path(path)


def _root(request: Request) -> str:
    root: str = request.scope.get("root_path", "")
    return root.rstrip("/")


def _openapi_url(request: Request) -> str:
    url: str | None = request.app.openapi_url
    if url is None:
        raise RuntimeError("the documentation pages need the app's OpenAPI document")
    return _root(request) + url


router = APIRouter(include_in_schema=False)


@router.get("/docs")
async def swagger_ui(request: Request) -> HTMLResponse:
    root = _root(request)
    app: FastAPI = request.app
    return get_swagger_ui_html(
        openapi_url=_openapi_url(request),
        title=f"{app.title} - Swagger UI",
        swagger_js_url=f"{root}{SWAGGER_UI_ASSETS}/swagger-ui-bundle.js",
        swagger_css_url=f"{root}{SWAGGER_UI_ASSETS}/swagger-ui.css",
        swagger_favicon_url=root + _FAVICON,
        oauth2_redirect_url=root + OAUTH2_REDIRECT,
        init_oauth=app.swagger_ui_init_oauth,
        swagger_ui_parameters={**_SWAGGER_UI_PARAMETERS, **(app.swagger_ui_parameters or {})},
    )


@router.get(OAUTH2_REDIRECT)
async def swagger_ui_oauth2_redirect() -> HTMLResponse:
    """Where Swagger UI's OAuth2 flows return to, as FastAPI's own docs serve it."""
    return get_swagger_ui_oauth2_redirect_html()


@router.get("/redoc")
async def redoc(request: Request) -> HTMLResponse:
    root = _root(request)
    app: FastAPI = request.app
    return get_redoc_html(
        openapi_url=_openapi_url(request),
        title=f"{app.title} - ReDoc",
        redoc_js_url=f"{root}{REDOC_ASSETS}/redoc.standalone.js",
        redoc_favicon_url=root + _FAVICON,
        with_google_fonts=False,
    )


def install(app: FastAPI) -> None:
    """Serve the two pages and their assets; the app is made with docs_url=None and
    redoc_url=None, so that FastAPI's CDN-backed pages are not served as well."""
    app.include_router(router)
    app.mount(
        SWAGGER_UI_ASSETS,
        _Files(SWAGGER_UI_FILES, packages=[("fastapi_swagger", "resources")]),
        name="swagger-ui-assets",
    )
    app.mount(REDOC_ASSETS, _Files(REDOC_FILES, directory=REDOC_DIRECTORY), name="redoc-assets")
