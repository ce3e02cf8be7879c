"""Webhook hosts (app.domain.target): a host accepted at create is one the HTTP client can
encode and request, spelt as it will be looked up; stored targets read as they were written."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from yarl import URL

from app.domain.limits import STORED
from app.domain.target import WebhookTarget, encoded_host, request_host

HOSTS = [
    "example.com",
    "EXAMPLE.com",
    "münchen.example",
    "faß.test",
    "example\u3002com",
    "example.com.",
    "_hooks.internal",
    "a" * 63 + ".example",
    "127.0.0.1",
    "xn--mnchen-3ya.example",
    "\uff25\uff38\uff21\uff2d\uff30\uff2c\uff25.com",  # fullwidth EXAMPLE
    "exämple..com",
    "a\u200bb.example",
    "\u00ad.example",
    "a" * 64 + ".example",
    "a\u2060b.example",
    "ex\u0301ample.com",
    "a.-b.example",
    "ス.example",
    "\u0663\u0661.example",
]


def webhook(host: str) -> WebhookTarget:
    return WebhookTarget(type="webhook", url=f"http://{host}/hook")


@pytest.mark.parametrize("host", HOSTS)
def test_a_host_accepted_at_create_is_requested_as_the_http_client_encodes_it(host: str) -> None:
    try:
        target = webhook(host)
    except ValidationError:
        return  # refused: nothing to request
    url = URL(target.url)  # raises on a host yarl cannot encode

    assert request_host(target.url) == url.raw_host
    assert (url.raw_host or "").encode("idna")  # what getaddrinfo encodes it with


@pytest.mark.parametrize(
    "host",
    ["exämple..com", "\u00ad.example", "a" * 64 + ".example", "a\u200bb.example", "a" * 254],
)
def test_a_host_the_http_client_cannot_encode_is_refused_naming_the_url(host: str) -> None:
    with pytest.raises(ValidationError) as refused:
        webhook(host)

    (error,) = refused.value.errors()
    assert error["loc"] == ("url",)
    assert "host" in error["msg"]


@pytest.mark.parametrize(
    "host", ["exämple..com", "\u00ad.example", "a" * 64 + ".example", "a\u200bb.example"]
)
def test_a_stored_target_with_such_a_host_still_reads(host: str) -> None:
    url = f"http://{host}/hook"

    target = WebhookTarget.model_validate({"type": "webhook", "url": url}, context=STORED)

    assert target.url == url
    assert request_host(url) == host.lower()


def test_a_non_ascii_name_is_encoded_as_the_http_client_does() -> None:
    assert encoded_host("Faß.Test") == "xn--fa-hia.test"
    assert encoded_host("example\u3002com") == "example.com"
    with pytest.raises(UnicodeError):
        encoded_host("a\u200bb.example")
