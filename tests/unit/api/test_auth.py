"""The parts of the API key check that need no app: headers, key lookup, open paths, logs."""

from __future__ import annotations

import base64
import io
import logging

import pytest

from app.api.auth import KeyRing, is_open, presented_key
from app.settings.api_keys import ApiKey
from app.telemetry.logs import LogFormat, configure

KEY = "s3cr3t-0123456789abcdef"


def headers(value: str) -> list[tuple[bytes, bytes]]:
    return [(b"authorization", value.encode())]


@pytest.mark.parametrize(
    ("value", "key"),
    [
        (f"Bearer {KEY}", KEY),
        (f"bearer   {KEY} ", KEY),
        ("Basic " + base64.b64encode(f"u:{KEY}".encode()).decode(), KEY),
        ("Basic " + base64.b64encode(f":{KEY}".encode()).decode(), KEY),
        ("Basic " + base64.b64encode(KEY.encode()).decode(), None),
        ("Basic " + base64.b64encode(b"u:").decode(), None),
        ("Basic %%%", None),
        ("Bearer", None),
        (KEY, None),
        (f"Digest {KEY}", None),
    ],
)
def test_the_key_a_header_presents(value: str, key: str | None) -> None:
    assert presented_key(headers(value)) == key


def test_no_header_or_two_headers_present_no_key() -> None:
    assert presented_key([]) is None
    assert presented_key(headers(f"Bearer {KEY}") * 2) is None


def test_the_ring_finds_the_entry_of_a_key_and_nothing_else() -> None:
    ring = KeyRing([ApiKey("a", KEY), ApiKey("b", KEY[::-1], read_only=True)])

    found = ring.find(KEY[::-1])
    assert found is not None
    assert (found.name, found.read_only) == ("b", True)
    assert ring.find(KEY[:-1]) is None
    assert ring.find("") is None
    assert bool(ring)
    assert not KeyRing([])


@pytest.mark.parametrize(
    ("path", "open_"),
    [
        ("/healthz", True),
        ("/readyz", True),
        ("/metrics", True),
        ("/docs", True),
        ("/docs/oauth2-redirect", True),
        ("/redoc", True),
        ("/openapi.json", True),
        ("/static/swagger-ui.css", True),
        ("/static/../v1/schedules", False),
        ("/v1/schedules", False),
        ("/healthz/", False),
        ("/ui", False),
        ("/", False),
    ],
)
def test_which_paths_are_open(path: str, open_: bool) -> None:
    assert is_open(path) is open_


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_log_lines_mask_keys_and_authorization_credentials(fmt: LogFormat) -> None:
    configure("INFO", fmt, secrets=[KEY])
    handler = next(h for h in logging.getLogger().handlers if getattr(h, "_chronoq", False))
    assert isinstance(handler, logging.StreamHandler)
    lines = io.StringIO()
    previous = handler.setStream(lines)
    try:
        log = logging.getLogger("tests.auth")
        log.warning("headers %s", [(b"authorization", f"Bearer {KEY}x".encode())])
        log.warning("Authorization: Basic dXNlcjpwYXNzd29yZA==")
        try:
            raise ValueError(f"bad {KEY}")
        except ValueError:
            log.exception("failed")
    finally:
        handler.setStream(previous)
        configure("INFO")
    text = lines.getvalue()
    assert KEY not in text
    assert "dXNlcjpwYXNzd29yZA" not in text
    assert text.count("[redacted]") >= 3
