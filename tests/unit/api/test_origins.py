"""Whether a page's Origin is this service's own (app.api.hosts.check_origin), without an app:
the one check of HTTP Basic changes and of the console's forms, directly and behind a proxy."""

from __future__ import annotations

from typing import Any

import pytest

from app.api.hosts import check_origin
from app.settings import Settings
from tests.conftest import make_settings

PROXY = "127.0.0.1"  # a peer the default CHRONOQ_FORWARDED_ALLOW_IPS trusts
STRANGER = "203.0.113.9"


def settings(**overrides: Any) -> Settings:
    return make_settings("sqlite:///:memory:", api_keys="ops:0123456789abcdef-ops", **overrides)


def scope(
    headers: dict[str, str] | list[tuple[str, str]],
    scheme: str = "http",
    *,
    peer: str = PROXY,
    configured: Settings | None = None,
) -> dict[str, object]:
    pairs = headers.items() if isinstance(headers, dict) else headers
    raw = [(name.lower().encode(), value.encode()) for name, value in pairs]
    state = {"settings": configured} if configured is not None else {}
    return {
        "type": "http",
        "scheme": scheme,
        "headers": raw,
        "client": (peer, 50000),
        "state": state,
    }


@pytest.mark.parametrize(
    ("headers", "scheme", "same"),
    [
        ({"Host": "127.0.0.1:8000"}, "http", True),
        ({"Host": "127.0.0.1:8000", "Origin": "http://127.0.0.1:8000"}, "http", True),
        # The scheme's default port is the same origin, written or not, on either side.
        ({"Host": "localhost", "Origin": "http://localhost:80"}, "http", True),
        ({"Host": "localhost:80", "Origin": "http://localhost"}, "http", True),
        ({"Host": "chronoq.example", "Origin": "https://chronoq.example"}, "https", True),
        ({"Host": "chronoq.example:443", "Origin": "https://chronoq.example"}, "https", True),
        ({"Host": "Chronoq.Example.", "Origin": "http://chronoq.example"}, "http", True),
        ({"Host": "[::1]:8000", "Origin": "http://[::1]:8000"}, "http", True),
        # What a proxy that drops the port causes: the browser's origin has one, Host not.
        ({"Host": "127.0.0.1", "Origin": "http://127.0.0.1:8080"}, "http", False),
        ({"Host": "127.0.0.1:8000", "Origin": "http://localhost:8000"}, "http", False),
        ({"Host": "127.0.0.1:8000", "Origin": "http://127.0.0.1:8001"}, "http", False),
        ({"Host": "chronoq.example", "Origin": "https://chronoq.example"}, "http", False),
        ({"Host": "chronoq.example", "Origin": "https://chronoq.example:80"}, "http", False),
        ({"Host": "chronoq.example", "Origin": "null"}, "http", False),
        ({"Host": "chronoq.example", "Origin": "http://x@chronoq.example"}, "http", False),
        ({"Host": "chronoq.example", "Origin": "http://chronoq.example/"}, "http", False),
        ({"Host": "chronoq.example", "Origin": "ftp://chronoq.example"}, "http", False),
        ({"Origin": "http://chronoq.example"}, "http", False),
        # Fetch metadata, which no page can forge, says same-origin: whatever Origin says.
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
        (
            {"Host": "a.example", "Origin": "http://a.example", "Sec-Fetch-Site": "cross-site"},
            "http",
            True,
        ),
        # Without an Origin, a Referer's origin is compared; with neither, no page sent it.
        ({"Host": "a.example", "Referer": "http://a.example/ui/schedules?x=1"}, "http", True),
        ({"Host": "a.example", "Referer": "https://b.example/page"}, "http", False),
        ({"Host": "a.example", "Referer": "about:blank"}, "http", False),
    ],
)
def test_an_origin_is_this_services_when_scheme_host_and_port_are_those_reached(
    headers: dict[str, str], scheme: str, same: bool
) -> None:
    assert check_origin(scope(headers, scheme)).same is same
    # The configured app answers alike when nothing is forwarded and no public origin is set.
    assert check_origin(scope(headers, scheme, configured=settings())).same is same


def test_several_origin_headers_are_refused() -> None:
    headers = [
        ("Host", "a.example"),
        ("Origin", "http://a.example"),
        ("Origin", "http://a.example"),
    ]

    check = check_origin(scope(headers))

    assert not check.same
    assert "several Origin headers" in check.compared()


BEHIND_NGINX = {"Host": "chronoq-1:8000", "X-Forwarded-Host": "127.0.0.1:8080"}


def test_a_trusted_proxy_names_the_host_the_browser_used() -> None:
    check = check_origin(
        scope({**BEHIND_NGINX, "Origin": "http://127.0.0.1:8080"}, configured=settings())
    )

    assert check.same
    assert [str(origin) for origin in check.expected] == ["http://127.0.0.1:8080"]


def test_forwarded_headers_from_a_peer_not_trusted_are_ignored() -> None:
    check = check_origin(
        scope(
            {**BEHIND_NGINX, "Origin": "http://127.0.0.1:8080"},
            peer=STRANGER,
            configured=settings(),
        )
    )

    assert not check.same
    assert [str(origin) for origin in check.expected] == ["http://chronoq-1:8000"]


def test_the_operator_may_trust_other_proxies() -> None:
    headers = {**BEHIND_NGINX, "Origin": "http://127.0.0.1:8080"}
    for allowed in ("203.0.113.0/24", "10.0.0.1, 203.0.113.9", "*"):
        configured = settings(forwarded_allow_ips=allowed)
        assert check_origin(scope(headers, peer=STRANGER, configured=configured)).same, allowed
    configured = settings(forwarded_allow_ips="10.0.0.0/8")
    assert not check_origin(scope(headers, peer=STRANGER, configured=configured)).same


def test_a_forwarded_proto_from_a_trusted_proxy_is_the_scheme_the_browser_used() -> None:
    headers = {"Host": "chronoq.example", "X-Forwarded-Proto": "https"}
    page = {**headers, "Origin": "https://chronoq.example"}
    configured = settings()

    assert check_origin(scope(page, configured=configured)).same
    assert not check_origin(
        scope({**headers, "Origin": "http://chronoq.example"}, configured=configured)
    ).same
    assert not check_origin(scope(page, peer=STRANGER, configured=configured)).same
    # Not a scheme of a page: the request's own is kept.
    odd = {
        "Host": "chronoq.example",
        "X-Forwarded-Proto": "gopher",
        "Origin": "http://chronoq.example",
    }
    assert check_origin(scope(odd, configured=configured)).same


def test_the_proxy_next_to_this_service_is_believed_not_what_the_client_sent_it() -> None:
    # A proxy that appends: the client's own X-Forwarded-Host comes first, the proxy's last.
    headers = {
        "Host": "chronoq-1:8000",
        "X-Forwarded-Host": "evil.example, chronoq.example",
        "X-Forwarded-Proto": "http, https",
    }
    configured = settings()

    assert check_origin(
        scope({**headers, "Origin": "https://chronoq.example"}, configured=configured)
    ).same
    assert not check_origin(
        scope({**headers, "Origin": "http://evil.example"}, configured=configured)
    ).same


def test_a_forwarded_host_never_widens_what_the_allowed_hosts_admit() -> None:
    configured = settings(allowed_hosts="chronoq.example, chronoq-1")
    admitted = {"Host": "chronoq-1:8000", "X-Forwarded-Host": "chronoq.example"}
    refused = {"Host": "chronoq-1:8000", "X-Forwarded-Host": "evil.example"}

    assert check_origin(
        scope({**admitted, "Origin": "http://chronoq.example"}, configured=configured)
    ).same
    check = check_origin(scope({**refused, "Origin": "http://evil.example"}, configured=configured))
    assert not check.same
    assert [str(origin) for origin in check.expected] == ["http://chronoq-1:8000"]


def test_a_public_origin_is_accepted_beside_the_requests_own() -> None:
    configured = settings(public_origin="https://chronoq.example.com")
    headers = {"Host": "chronoq-1:8000"}

    assert check_origin(
        scope({**headers, "Origin": "https://chronoq.example.com"}, configured=configured)
    ).same
    assert check_origin(
        scope({**headers, "Origin": "https://chronoq.example.com:443"}, configured=configured)
    ).same
    assert check_origin(
        scope({**headers, "Origin": "http://chronoq-1:8000"}, configured=configured)
    ).same
    for other in ("http://chronoq.example.com", "https://chronoq.example.com:8443", "null"):
        check = check_origin(scope({**headers, "Origin": other}, configured=configured))
        assert not check.same, other
        assert "'https://chronoq.example.com' (CHRONOQ_PUBLIC_ORIGIN)" in check.compared()


def test_a_refusal_says_what_it_compared() -> None:
    check = check_origin(scope({"Host": "127.0.0.1", "Origin": "http://127.0.0.1:8080"}))

    assert check.compared() == (
        "the browser sent Origin 'http://127.0.0.1:8080', "
        "and this service's origin is 'http://127.0.0.1'"
    )
    null = check_origin(scope({"Host": "127.0.0.1", "Origin": "null"}))
    assert null.compared().startswith("the browser sent Origin 'null', ")
    nameless = check_origin(scope({"Origin": "http://127.0.0.1"}))
    assert "unknown (no Host)" in nameless.compared()


def test_a_refusal_repeats_no_path_query_or_credentials_and_is_bounded() -> None:
    referer = check_origin(
        scope({"Host": "a.example", "Referer": "https://b.example/reset?token=s3cret#k"})
    )
    assert not referer.same
    assert "s3cret" not in referer.compared()
    assert "/reset" not in referer.compared()
    assert "'https://b.example'" in referer.compared()

    spelled = check_origin(scope({"Host": "a.example", "Referer": "https://u:s3cret@b.example/"}))
    assert "s3cret" not in spelled.compared()

    huge = check_origin(scope({"Host": "a.example", "Origin": "http://" + "x" * 10_000}))
    assert not huge.same
    assert len(huge.compared()) < 400
