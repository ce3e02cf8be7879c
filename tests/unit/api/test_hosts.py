"""Host headers, without an app."""

from __future__ import annotations

import pytest

from app.settings.web_origins import split_host


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("localhost", ("localhost", None)),
        ("LocalHost.:8000", ("localhost", 8000)),
        ("127.0.0.1:8000", ("127.0.0.1", 8000)),
        ("[::1]:8000", ("::1", 8000)),
        ("[::1]", ("::1", None)),
        ("example.com:", ("example.com", None)),
        ("::1", None),
        ("[::1", None),
        ("[::1]x", None),
        ("example.com:http", None),
        ("example.com:99999", None),
        ("", None),
        (":8000", None),
    ],
)
def test_a_host_header_is_a_name_and_a_port(value: str, parsed: tuple[str, int] | None) -> None:
    assert split_host(value) == parsed
