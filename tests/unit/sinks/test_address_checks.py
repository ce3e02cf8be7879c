"""The sink's delivery-time address checks: literal hosts before sending, names in the resolver.

Names resolve through a FakeDNS that answers what each test sets; every request that does
go out goes to the local receiver on 127.0.0.1.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from ipaddress import ip_network
from typing import Any

import aiohttp.connector
import pytest

from app.domain.addresses import AddressPolicy
from app.domain.occurrence import Delivered, Permanent, Retryable
from app.domain.target import WebhookTarget
from app.sinks.webhook import DNS_CACHE_SECONDS, WebhookSink
from tests import factories
from tests.dns import FakeDNS
from tests.receiver import Receiver, Reply

METADATA = "169.254.169.254"
CLOUD = AddressPolicy.of(deny=[ip_network("10.0.0.0/8"), ip_network("127.0.0.0/8")])


@asynccontextmanager
async def open_sink(
    dns: FakeDNS, policy: AddressPolicy | None = None
) -> AsyncIterator[WebhookSink]:
    sink = WebhookSink(concurrency=4, max_timeout=5, policy=policy, resolver=dns)
    await sink.open()
    try:
        yield sink
    finally:
        await sink.close()


def stored(url: str) -> WebhookTarget:
    """A target as read back from a row: input-only rules (host spellings) not applied."""
    return WebhookTarget.model_validate({"type": "webhook", "url": url}, context={"stored": True})


async def deliver(sink: WebhookSink, url: str) -> Any:
    return await sink.deliver(factories.make_delivery(target=stored(url)))


def assert_denied(outcome: object, *needles: str) -> None:
    assert isinstance(outcome, Permanent), outcome
    assert outcome.error.startswith("address denied: ")
    assert "a denied address" in outcome.error
    for needle in needles:
        assert needle in outcome.error


@pytest.mark.parametrize(
    "host",
    [
        METADATA,
        "2852039166",
        "0xA9FEA9FE",
        "0251.0376.0251.0376",
        "169.254.43518",
        "[::ffff:169.254.169.254]",
        "[::ffff:a9fe:a9fe]",
        "0.0.0.0",
        "[::]",
        "[fe80::1]",
        "224.0.0.1",
        "[ff02::1]",
        "255.255.255.255",
    ],
)
async def test_a_denied_literal_host_fails_permanently_without_a_lookup(host: str) -> None:
    dns = FakeDNS()
    async with open_sink(dns) as sink:
        outcome = await deliver(sink, f"http://{host}:9/hook")

    assert_denied(outcome)
    assert dns.lookups == {}


async def test_a_stored_numeric_spelling_names_the_address_it_means() -> None:
    async with open_sink(FakeDNS()) as sink:
        outcome = await deliver(sink, "http://2852039166/latest/meta-data/")

    assert isinstance(outcome, Permanent)
    assert outcome.error == (
        "address denied: the host 2852039166 is 169.254.169.254, a denied address "
        "(in 169.254.0.0/16, always denied)"
    )


async def test_an_ip_literal_is_never_resolved(receiver: Receiver) -> None:
    dns = FakeDNS()
    async with open_sink(dns) as sink:
        first = await deliver(sink, receiver.url("/hook"))
        second = await deliver(sink, receiver.url("/hook"))

    assert isinstance(first, Delivered)
    assert isinstance(second, Delivered)
    assert dns.lookups == {}
    assert len(receiver.on("/hook")) == 2


async def test_a_name_that_resolves_to_a_denied_address_fails_permanently(
    receiver: Receiver,
) -> None:
    dns = FakeDNS({"hooks.test": [METADATA]})
    async with open_sink(dns) as sink:
        outcome = await deliver(sink, f"http://hooks.test:{receiver.port}/hook")

    assert_denied(outcome, "hooks.test resolves to 169.254.169.254")
    assert receiver.requests == []


async def test_one_denied_address_among_the_answers_is_enough(receiver: Receiver) -> None:
    dns = FakeDNS({"hooks.test": ["127.0.0.1", METADATA]})
    async with open_sink(dns) as sink:
        outcome = await deliver(sink, f"http://hooks.test:{receiver.port}/hook")

    assert_denied(outcome, METADATA)
    assert receiver.requests == []


async def test_a_name_that_resolves_to_an_allowed_address_is_delivered(
    receiver: Receiver,
) -> None:
    dns = FakeDNS({"hooks.test": ["127.0.0.1"]})
    async with open_sink(dns) as sink:
        outcome = await deliver(sink, f"http://hooks.test:{receiver.port}/hook")

    assert isinstance(outcome, Delivered)
    assert receiver.on("/hook")[0].headers["Host"] == f"hooks.test:{receiver.port}"


async def test_a_second_delivery_to_a_name_within_the_ttl_is_not_resolved_again(
    receiver: Receiver,
) -> None:
    # The receiver closes every connection, so the second delivery connects anew and
    # takes the address from the connector's DNS cache.
    receiver.always("/hook", Reply(headers={"Connection": "close"}))
    dns = FakeDNS({"hooks.test": ["127.0.0.1"]})
    async with open_sink(dns) as sink:
        url = f"http://hooks.test:{receiver.port}/hook"
        outcomes = [await deliver(sink, url), await deliver(sink, url)]

    assert [type(o) for o in outcomes] == [Delivered, Delivered]
    assert dns.lookups == {"hooks.test": 1}
    assert len(receiver.on("/hook")) == 2


async def test_the_deny_list_applies_to_names_and_literals(receiver: Receiver) -> None:
    dns = FakeDNS({"hooks.test": ["127.0.0.1"]})
    async with open_sink(dns, CLOUD) as sink:
        by_name = await deliver(sink, f"http://hooks.test:{receiver.port}/hook")
        by_literal = await deliver(sink, receiver.url("/hook"))
        by_spelling = await deliver(sink, f"http://0x7f.0.0.1:{receiver.port}/hook")

    assert_denied(by_name, "127.0.0.0/8, on the deny list")
    assert_denied(by_literal, "127.0.0.0/8, on the deny list")
    assert_denied(by_spelling, "the host 0x7f.0.0.1 is 127.0.0.1")
    assert receiver.requests == []


@pytest.mark.parametrize(
    ("allow", "admitted"),
    [
        (lambda: AddressPolicy.of(allow_networks=[], allow_names=["hooks.test"]), True),
        (lambda: AddressPolicy.of(allow_networks=[], allow_names=["*.test"]), True),
        (lambda: AddressPolicy.of(allow_networks=[ip_network("127.0.0.0/8")]), True),
        (lambda: AddressPolicy.of(allow_networks=[ip_network("10.0.0.0/8")]), False),
        (lambda: AddressPolicy.of(allow_networks=[], allow_names=["other.test"]), False),
    ],
)
async def test_an_allow_list_admits_only_its_names_and_networks(
    receiver: Receiver, allow: Callable[[], AddressPolicy], admitted: bool
) -> None:
    dns = FakeDNS({"hooks.test": ["127.0.0.1"]})
    async with open_sink(dns, allow()) as sink:
        outcome = await deliver(sink, f"http://hooks.test:{receiver.port}/hook")

    if admitted:
        assert isinstance(outcome, Delivered)
    else:
        assert_denied(outcome, "not on the allow list")
        assert receiver.requests == []


async def test_an_allowed_name_still_meets_the_built_in_denials(receiver: Receiver) -> None:
    dns = FakeDNS({"hooks.test": [METADATA]})
    policy = AddressPolicy.of(allow_networks=[], allow_names=["hooks.test"])
    async with open_sink(dns, policy) as sink:
        outcome = await deliver(sink, f"http://hooks.test:{receiver.port}/hook")

    assert_denied(outcome, "always denied")


async def test_a_name_that_does_not_resolve_is_retried() -> None:
    async with open_sink(FakeDNS()) as sink:
        outcome = await deliver(sink, "http://nowhere.test:9/hook")

    assert isinstance(outcome, Retryable)


async def test_a_host_one_reading_makes_an_address_and_the_other_a_name_is_never_sent(
    receiver: Receiver,
) -> None:
    # WHATWG URL rules (browsers', reqwest's) decode the percent-escapes to 127.0.0.1;
    # yarl's, by which both the checks and the client read hosts, keep a name that resolves
    # nowhere: the checks and the connection must read a host the same way.
    dns = FakeDNS()
    async with open_sink(dns) as sink:
        outcome = await deliver(sink, f"http://%31%32%37.0.0.1:{receiver.port}/hook")

    assert not isinstance(outcome, Delivered)
    assert receiver.requests == []


async def test_proxies_named_by_the_environment_are_not_used(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A proxy would connect to an address no check saw: here, a port nothing listens on.
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    dns = FakeDNS({"hooks.test": ["127.0.0.1"]})
    async with open_sink(dns) as sink:
        by_name = await deliver(sink, f"http://hooks.test:{receiver.port}/hook")
        by_address = await deliver(sink, receiver.url("/hook"))

    assert [type(by_name), type(by_address)] == [Delivered, Delivered]
    assert len(receiver.on("/hook")) == 2


async def test_a_name_whose_address_changed_is_checked_again_after_the_ttl(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Rebinding after the cached answer expires: the new answer is checked before use.
    receiver.always("/hook", Reply(headers={"Connection": "close"}))
    dns = FakeDNS({"hooks.test": ["127.0.0.1"]})
    async with open_sink(dns) as sink:
        url = f"http://hooks.test:{receiver.port}/hook"
        first = await deliver(sink, url)
        dns.names["hooks.test"] = [METADATA]
        later = time.monotonic() + DNS_CACHE_SECONDS + 1
        # The clock of the connector's DNS cache.
        monkeypatch.setattr(aiohttp.connector, "monotonic", lambda: later)
        second = await deliver(sink, url)

    assert isinstance(first, Delivered)
    assert_denied(second, "hooks.test resolves to 169.254.169.254")
    assert len(receiver.on("/hook")) == 1
