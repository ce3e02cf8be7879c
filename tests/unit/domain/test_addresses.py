"""Target address rules: host spellings parsed, addresses judged (DESIGN 8, target addresses)."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv6Address, ip_address, ip_network

import pytest

from app.domain.addresses import (
    AddressPolicy,
    HostSpellingError,
    embedded_ipv4,
    parse_host,
)

METADATA = IPv4Address("169.254.169.254")
OPEN = AddressPolicy()
CLOUD = AddressPolicy.of(deny=[ip_network("10.0.0.0/8"), ip_network("127.0.0.0/8")])


@pytest.mark.parametrize(
    "host",
    [
        "169.254.169.254",
        "2852039166",
        "0xA9FEA9FE",
        "0xa9fea9fe",
        "0251.0376.0251.0376",
        "169.254.43518",
        "169.16689662",
        "0xa9.0xfe.0xa9.0xfe",
        "169.254.169.254.",
    ],
)
def test_every_ipv4_spelling_of_the_metadata_address_parses_to_it(host: str) -> None:
    assert parse_host(host) == METADATA


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("[::1]", "::1"),
        ("::ffff:169.254.169.254", "::ffff:169.254.169.254"),
        ("[fe80::1%25eth0]", "fe80::1%eth0"),
        ("0", "0.0.0.0"),
        ("127.1", "127.0.0.1"),
    ],
)
def test_other_literals_parse(host: str, address: str) -> None:
    assert parse_host(host) == ip_address(address)


@pytest.mark.parametrize("host", ["example.com", "hooks.internal", "1.2.3.example", "a-1"])
def test_names_are_not_addresses(host: str) -> None:
    assert parse_host(host) is None


@pytest.mark.parametrize("host", ["1.2.3.4.5", "256.1.1.1", "08.1.1.1", "1..2", "4294967296"])
def test_a_numeric_host_that_is_no_address_is_an_error(host: str) -> None:
    with pytest.raises(HostSpellingError):
        parse_host(host)


@pytest.mark.parametrize(
    "address",
    [
        "::ffff:169.254.169.254",
        "::169.254.169.254",
        "64:ff9b::a9fe:a9fe",
        "2002:a9fe:a9fe::1",
    ],
)
def test_ipv6_forms_that_carry_an_ipv4_address_give_it_up(address: str) -> None:
    parsed = ip_address(address)
    assert isinstance(parsed, IPv6Address)

    assert embedded_ipv4(parsed) == METADATA


@pytest.mark.parametrize("address", ["::1", "::", "2001:db8::1", "fd00::1"])
def test_plain_ipv6_addresses_carry_none(address: str) -> None:
    parsed = ip_address(address)
    assert isinstance(parsed, IPv6Address)

    assert embedded_ipv4(parsed) is None


@pytest.mark.parametrize(
    "address",
    [
        "0.0.0.0",
        "0.1.2.3",
        "169.254.169.254",
        "169.254.0.1",
        "224.0.0.1",
        "239.255.255.250",
        "255.255.255.255",
        "::",
        "fe80::1",
        "ff02::1",
        "::ffff:169.254.169.254",
        "::ffff:0.0.0.0",
        "64:ff9b::a9fe:a9fe",
        "2002:a9fe:a9fe::",
        "fd00:ec2::254",
    ],
)
def test_the_built_in_denials_apply_without_configuration(address: str) -> None:
    assert OPEN.denial(ip_address(address)) is not None


@pytest.mark.parametrize(
    "address", ["127.0.0.1", "10.1.2.3", "192.168.0.1", "172.16.0.1", "::1", "fd00::1", "8.8.8.8"]
)
def test_loopback_private_and_public_addresses_are_allowed_by_default(address: str) -> None:
    assert OPEN.denial(ip_address(address)) is None


@pytest.mark.parametrize("address", ["10.0.0.1", "127.0.0.1", "::ffff:127.0.0.1"])
def test_the_deny_list_adds_ranges(address: str) -> None:
    denial = CLOUD.denial(ip_address(address))

    assert denial is not None
    assert "on the deny list" in str(denial)


def test_an_allow_list_admits_only_its_networks() -> None:
    policy = AddressPolicy.of(allow_networks=[ip_network("10.20.0.0/16")])

    assert policy.denial(ip_address("10.20.1.1")) is None
    assert policy.denial(ip_address("::ffff:10.20.1.1")) is None
    assert "not on the allow list" in str(policy.denial(ip_address("10.21.0.1")))


def test_the_built_in_denials_apply_inside_an_allow_list() -> None:
    policy = AddressPolicy.of(allow_networks=[ip_network("0.0.0.0/0")])

    assert policy.denial(METADATA) is not None


def test_an_allowed_name_is_admitted_at_any_address_not_denied() -> None:
    policy = AddressPolicy.of(allow_networks=[], allow_names=["hooks.example.com"])

    assert policy.resolved_problem("hooks.example.com", ["203.0.113.9"]) is None
    assert policy.resolved_problem("HOOKS.example.com.", ["203.0.113.9"]) is None
    assert policy.resolved_problem("other.example.com", ["203.0.113.9"]) is not None
    assert policy.resolved_problem("hooks.example.com", ["169.254.169.254"]) is not None


def test_a_wildcard_name_admits_subdomains_but_not_the_bare_domain() -> None:
    policy = AddressPolicy.of(allow_networks=[], allow_names=["*.svc.example"])

    assert policy.admits_name("a.svc.example")
    assert policy.admits_name("a.b.svc.example")
    assert not policy.admits_name("svc.example")
    assert not policy.admits_name("evilsvc.example")


def test_a_name_is_denied_when_any_of_its_addresses_is() -> None:
    problem = OPEN.resolved_problem("hook.test", ["127.0.0.1", "169.254.169.254"])

    assert problem == (
        "the host hook.test resolves to 169.254.169.254, a denied address "
        "(in 169.254.0.0/16, always denied)"
    )


def test_an_answer_that_is_not_an_address_is_denied() -> None:
    assert OPEN.resolved_problem("hook.test", ["not-an-ip"]) is not None


@pytest.mark.parametrize(
    ("host", "message"),
    [
        (
            "2852039166",
            "the host 2852039166 is 169.254.169.254, a denied address "
            "(in 169.254.0.0/16, always denied)",
        ),
        (
            "169.254.169.254",
            "the host 169.254.169.254 is a denied address (in 169.254.0.0/16, always denied)",
        ),
        (
            "::ffff:a9fe:a9fe",
            "the host ::ffff:a9fe:a9fe is a denied address: it reaches 169.254.169.254 "
            "(in 169.254.0.0/16, always denied)",
        ),
    ],
)
def test_a_denied_literal_names_the_address_it_means(host: str, message: str) -> None:
    assert OPEN.literal_problem(host) == message


def test_names_and_allowed_literals_pass_the_literal_check() -> None:
    assert OPEN.literal_problem("hooks.example.com") is None
    assert OPEN.literal_problem("127.0.0.1") is None
    assert OPEN.literal_problem("[::1]") is None
