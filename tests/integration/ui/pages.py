"""What the console's HTTP tests share: keys, the form token on a page, posting a form."""

from __future__ import annotations

import base64
import re
from typing import Any

import httpx

from tests.integration.conftest import Harness

WRITER = "0123456789abcdef-console-writer"
READER = "0123456789abcdef-console-reader"
KEYS = f"ops:{WRITER},dash.board:{READER}:read"
ORIGIN = "http://localhost"  # the harness client's base URL


def basic(key: str) -> dict[str, str]:
    token = base64.b64encode(f"operator:{key}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def token_of(html: str) -> str:
    found = re.search(r'name="token" value="([^"]+)"', html)
    assert found is not None, "the page has no form token"
    return found.group(1)


def spec(harness: Harness, **extra: Any) -> dict[str, Any]:
    return {
        "event_type": "report.due",
        "payload": {"n": 1},
        "target": harness.webhook(),
        "trigger": {"type": "cron", "expression": "*/5 * * * *"},
        **extra,
    }


async def post_form(
    harness: Harness,
    path: str,
    fields: dict[str, Any],
    headers: dict[str, str] | None = None,
    origin: str | None = ORIGIN,
) -> httpx.Response:
    """A form post as a browser sends it from a console page (Origin: this host)."""
    sent = dict(headers or {})
    if origin is not None:
        sent["Origin"] = origin
    return await harness.client.post(path, data=fields, headers=sent)
