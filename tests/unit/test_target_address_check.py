"""The create-time address check (app.service.addresses): literals judged, names resolved once."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from ipaddress import ip_network

import pytest

from app.domain.addresses import AddressPolicy
from app.domain.errors import InvalidInputError
from app.domain.target import WebhookTarget
from app.service import addresses
from app.service.addresses import TargetAddresses
from tests.dns import FakeDNS


def hook(url: str) -> WebhookTarget:
    return WebhookTarget(type="webhook", url=url)


async def test_a_denied_literal_is_refused_without_a_lookup() -> None:
    dns = FakeDNS()

    with pytest.raises(InvalidInputError) as refused:
        await TargetAddresses(AddressPolicy(), dns).check(
            [(hook("http://[::ffff:169.254.169.254]/"), "#/target/url")]
        )

    assert refused.value.pointer == "#/target/url"
    assert dns.checks == {}


async def test_the_pointer_named_is_the_first_target_with_the_denied_name() -> None:
    dns = FakeDNS({"ok.test": ["127.0.0.1"], "bad.test": ["169.254.169.254"]})
    targets = [
        (hook("http://ok.test/"), "#/items/0/target/url"),
        (hook("http://bad.test/a"), "#/items/1/target/url"),
        (hook("http://bad.test/b"), "#/items/2/target/url"),
    ]

    with pytest.raises(InvalidInputError) as refused:
        await TargetAddresses(AddressPolicy(), dns).check(targets)

    assert refused.value.pointer == "#/items/1/target/url"
    assert dns.checks == {"ok.test": 1, "bad.test": 1}


async def test_a_name_that_does_not_resolve_is_left_to_delivery() -> None:
    policy = AddressPolicy.of(allow_networks=[ip_network("10.0.0.0/8")])
    dns = FakeDNS()

    await TargetAddresses(policy, dns).check([(hook("http://later.test/"), "#")])

    assert dns.checks == {"later.test": 1}, "the name was looked up, and no answer refused"
    # The same name answering with an address the policy refuses is refused: what let it
    # through was the missing answer, not a check that skipped it.
    answering = FakeDNS({"later.test": ["192.168.0.7"]})
    with pytest.raises(InvalidInputError) as refused:
        await TargetAddresses(policy, answering).check([(hook("http://later.test/"), "#/x")])
    assert refused.value.pointer == "#/x"


async def test_a_lookup_that_hangs_is_given_up_and_left_to_delivery(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Hanging:
        def __init__(self) -> None:
            self.asked: list[str] = []

        async def addresses(self, host: str) -> Sequence[str]:
            self.asked.append(host)
            await asyncio.sleep(3600)
            return []

    monkeypatch.setattr(addresses, "RESOLVE_TIMEOUT", 0.01)
    resolver = Hanging()

    await TargetAddresses(AddressPolicy(), resolver).check([(hook("http://slow.test/"), "#")])

    assert resolver.asked == ["slow.test"], "the name was looked up, and the wait given up"


class UnencodableNames:
    """The system resolver's own IDNA codec refuses what it cannot encode."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def addresses(self, host: str) -> Sequence[str]:
        self.asked.append(host)
        raise UnicodeError("encoding with 'idna' codec failed (UnicodeError: label too long)")


async def test_a_name_the_resolver_cannot_encode_is_left_to_delivery() -> None:
    # Only a stored target could still hold one; its check must not fail the request.
    target = WebhookTarget.model_validate(
        {"type": "webhook", "url": "http://exämple..com/"}, context={"stored": True}
    )

    resolver = UnencodableNames()

    # No refusal: the check gives the name up, and delivery checks it again.
    await TargetAddresses(AddressPolicy(), resolver).check([(target, "#/target/url")])

    assert len(resolver.asked) == 1, "the name was looked up, not passed over unchecked"
