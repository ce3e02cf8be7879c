"""Host headers and origins, without an app."""

from __future__ import annotations

import pytest

from app.api.hosts import is_same_origin, split_host


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


def scope(headers: dict[str, str], scheme: str = "http") -> dict[str, object]:
    raw = [(name.lower().encode(), value.encode()) for name, value in headers.items()]
    return {"type": "http", "scheme": scheme, "headers": raw}


@pytest.mark.parametrize(
    ("headers", "scheme", "same"),
    [
        ({"Host": "127.0.0.1:8000"}, "http", True),
        ({"Host": "127.0.0.1:8000", "Origin": "http://127.0.0.1:8000"}, "http", True),
        ({"Host": "localhost", "Origin": "http://localhost:80"}, "http", True),
        ({"Host": "chronoq.example", "Origin": "https://chronoq.example"}, "https", True),
        ({"Host": "[::1]:8000", "Origin": "http://[::1]:8000"}, "http", True),
        ({"Host": "127.0.0.1:8000", "Origin": "http://localhost:8000"}, "http", False),
        ({"Host": "127.0.0.1:8000", "Origin": "http://127.0.0.1:8001"}, "http", False),
        ({"Host": "chronoq.example", "Origin": "https://chronoq.example"}, "http", False),
        ({"Host": "chronoq.example", "Origin": "null"}, "http", False),
        ({"Host": "chronoq.example", "Origin": "http://x@chronoq.example"}, "http", False),
        ({"Origin": "http://chronoq.example"}, "http", False),
        (
            {"Host": "chronoq.example", "Origin": "null", "Sec-Fetch-Site": "same-origin"},
            "http",
            True,
        ),
        (
            {"Host": "a.example", "Origin": "http://b.example", "Sec-Fetch-Site": "same-site"},
            "http",
            False,
        ),
    ],
)
def test_an_origin_is_this_services_when_scheme_host_and_port_are_those_reached(
    headers: dict[str, str], scheme: str, same: bool
) -> None:
    assert is_same_origin(scope(headers, scheme)) is same
