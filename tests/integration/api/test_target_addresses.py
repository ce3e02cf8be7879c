"""Webhook target addresses through the API and the loop (DESIGN 8, target addresses): a host
that is, or resolves to, a denied address is a 422 naming target.url at create, batch and
PATCH, and a name that resolves to one at delivery dead-letters at once.

Names resolve through the harness's FakeDNS; nothing is sent anywhere but 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.dns import FakeDNS
from tests.integration.api.test_bad_input import assert_problem_names, stored_schedules
from tests.integration.conftest import ON_MODULE_LOOP, Harness

METADATA = "169.254.169.254"


DENIED_HOSTS = [
    pytest.param(METADATA, id="metadata"),
    pytest.param("169.254.0.1", id="link-local"),
    pytest.param("2852039166", id="integer"),
    pytest.param("0xA9FEA9FE", id="hex integer"),
    pytest.param("0251.0376.0251.0376", id="octal"),
    pytest.param("169.254.43518", id="short"),
    pytest.param("0xa9.0xfe.0xa9.0xfe", id="hex parts"),
    pytest.param("[::ffff:169.254.169.254]", id="ipv4-mapped"),
    pytest.param("[::ffff:a9fe:a9fe]", id="ipv4-mapped hex"),
    pytest.param("[64:ff9b::a9fe:a9fe]", id="nat64"),
    pytest.param("[2002:a9fe:a9fe::]", id="6to4"),
    pytest.param("0.0.0.0", id="this network"),
    pytest.param("0", id="zero"),
    pytest.param("[::]", id="unspecified"),
    pytest.param("[fe80::1]", id="ipv6 link-local"),
    pytest.param("224.0.0.1", id="multicast"),
    pytest.param("[ff02::1]", id="ipv6 multicast"),
    pytest.param("255.255.255.255", id="broadcast"),
]


def body(url: str, **extra: Any) -> dict[str, Any]:
    return {
        "event_type": "test.event",
        "payload": {"n": 1},
        "target": {"type": "webhook", "url": url},
        "trigger": {"type": "cron", "expression": "*/5 * * * *"},
        **extra,
    }


def detail_of(response: Any) -> str:
    detail: str = response.json()["errors"][0]["detail"]
    return detail


@pytest.mark.parametrize("host", DENIED_HOSTS)
@ON_MODULE_LOOP
async def test_a_denied_host_is_refused_at_create(shared: Harness, host: str) -> None:
    response = await shared.client.post("/v1/schedules", json=body(f"http://{host}/latest"))

    assert_problem_names(response, 422, "#/target/url")
    assert "denied address" in detail_of(response)
    assert await stored_schedules(shared) == []


@pytest.mark.parametrize("host", DENIED_HOSTS)
@ON_MODULE_LOOP
async def test_a_denied_host_is_refused_at_patch(shared: Harness, host: str) -> None:
    created = await shared.create(trigger={"type": "cron", "expression": "*/5 * * * *"})

    response = await shared.client.patch(
        f"/v1/schedules/{created['id']}",
        json={"target": {"type": "webhook", "url": f"http://{host}/latest"}},
    )

    assert_problem_names(response, 422, "#/target/url")
    assert "denied address" in detail_of(response)
    unchanged = await shared.get(f"/v1/schedules/{created['id']}")
    assert unchanged["target"]["url"] == created["target"]["url"]


@ON_MODULE_LOOP
async def test_a_numeric_spelling_is_refused_naming_the_address_it_means(
    shared: Harness,
) -> None:
    response = await shared.client.post("/v1/schedules", json=body("http://2852039166/"))

    assert_problem_names(response, 422, "#/target/url")
    assert "the host 2852039166 is 169.254.169.254, a denied address" in detail_of(response)


@ON_MODULE_LOOP
async def test_a_denied_host_in_a_batch_names_its_item(shared: Harness) -> None:
    items = [body(shared.receiver.url("/ok")), body(f"http://{METADATA}/")]

    response = await shared.client.post("/v1/schedules/batch", json={"items": items})

    assert_problem_names(response, 422, "#/items/1/target/url")
    assert await stored_schedules(shared) == []


async def test_a_name_that_resolves_to_a_denied_address_is_refused_at_create(
    make_harness: Callable[..., Any],
) -> None:
    dns = FakeDNS({"metadata.test": [METADATA]})
    async with make_harness(dns=dns) as h:
        response = await h.client.post("/v1/schedules", json=body("http://metadata.test/x"))

        assert_problem_names(response, 422, "#/target/url")
        assert detail_of(response) == (
            "the host metadata.test resolves to 169.254.169.254, a denied address "
            "(in 169.254.0.0/16, always denied)"
        )
        assert dns.checks == {"metadata.test": 1}
        assert await stored_schedules(h) == []


async def test_a_name_is_resolved_once_for_a_whole_batch(make_harness: Callable[..., Any]) -> None:
    dns = FakeDNS({"hooks.test": ["127.0.0.1"]})
    async with make_harness(dns=dns) as h:
        items = [body(f"http://hooks.test:{h.receiver.port}/{n}") for n in range(5)]

        response = await h.client.post("/v1/schedules/batch", json={"items": items})

        assert response.status_code == 201, response.text
        assert dns.checks == {"hooks.test": 1}


@ON_MODULE_LOOP
async def test_a_name_that_does_not_resolve_yet_is_accepted(shared: Harness) -> None:
    response = await shared.client.post("/v1/schedules", json=body("http://later.test/x"))

    assert response.status_code == 201, response.text


async def test_a_name_rebound_to_a_denied_address_after_create_is_dead_lettered(
    make_harness: Callable[..., Any],
) -> None:
    dns = FakeDNS({"hooks.test": ["127.0.0.1"]})
    async with make_harness(dns=dns) as h:
        url = f"http://hooks.test:{h.receiver.port}/hook"
        created = await h.create(target={"type": "webhook", "url": url})
        dns.names["hooks.test"] = [METADATA]  # DNS rebinding: the answer changes

        async def dead() -> bool:
            return [o["status"] for o in await h.occurrences(created["id"])] == ["dead_lettered"]

        await h.step_until(dead)

        [occurrence] = await h.occurrences(created["id"])
        assert occurrence["attempts"] == 1
        assert occurrence["last_error"] == (
            "address denied: the host hooks.test resolves to 169.254.169.254, a denied "
            "address (in 169.254.0.0/16, always denied)"
        )
        assert h.receiver.requests == []
        assert dns.lookups == {"hooks.test": 1}


async def test_the_deny_list_refuses_the_loopback_receiver(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(target_deny="10.0.0.0/8,127.0.0.0/8") as h:
        response = await h.client.post("/v1/schedules", json=body(h.receiver.url("/hook")))

        assert_problem_names(response, 422, "#/target/url")
        assert detail_of(response) == (
            "the host 127.0.0.1 is a denied address (in 127.0.0.0/8, on the deny list)"
        )
        assert await stored_schedules(h) == []


async def test_the_deny_list_applies_to_what_a_name_resolves_to(
    make_harness: Callable[..., Any],
) -> None:
    dns = FakeDNS({"hooks.test": ["127.0.0.1"]})
    async with make_harness(dns=dns, target_deny="127.0.0.0/8") as h:
        response = await h.client.post("/v1/schedules", json=body("http://hooks.test/x"))

        assert_problem_names(response, 422, "#/target/url")
        assert "127.0.0.0/8, on the deny list" in detail_of(response)


async def test_an_allowed_name_is_accepted_and_delivered(make_harness: Callable[..., Any]) -> None:
    dns = FakeDNS({"hooks.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]})
    async with make_harness(dns=dns, target_allow="hooks.test") as h:
        port = h.receiver.port
        allowed = await h.client.post("/v1/schedules", json=body(f"http://hooks.test:{port}/"))
        refused = await h.client.post("/v1/schedules", json=body(f"http://other.test:{port}/"))
        literal = await h.client.post("/v1/schedules", json=body(h.receiver.url("/")))

        assert allowed.status_code == 201, allowed.text
        assert_problem_names(refused, 422, "#/target/url")
        assert "not on the allow list" in detail_of(refused)
        assert_problem_names(literal, 422, "#/target/url")

        created = await h.create(target={"type": "webhook", "url": f"http://hooks.test:{port}/"})
        await h.step()
        await h.receiver.wait_for(1)
        assert h.receiver.requests[0].headers["X-Schedule-Id"] == created["id"]


async def test_an_allowed_cidr_admits_the_addresses_inside_it(
    make_harness: Callable[..., Any],
) -> None:
    async with make_harness(target_allow="127.0.0.0/8") as h:
        inside = await h.client.post("/v1/schedules", json=body(h.receiver.url("/")))
        outside = await h.client.post("/v1/schedules", json=body("http://10.1.2.3/"))

        assert inside.status_code == 201, inside.text
        assert_problem_names(outside, 422, "#/target/url")


async def test_an_ip_literal_is_not_resolved_at_create_or_delivery(harness: Harness) -> None:
    created = await harness.create()

    async def delivered() -> bool:
        return [o["status"] for o in await harness.occurrences(created["id"])] == ["delivered"]

    await harness.step_until(delivered)

    assert harness.dns.checks == {}
    assert harness.dns.lookups == {}


async def test_a_rabbitmq_target_is_not_an_address(make_harness: Callable[..., Any]) -> None:
    target = {"type": "rabbitmq", "exchange": "", "routing_key": "jobs"}
    async with make_harness(amqp_url=None, target_allow="hooks.test") as h:
        response = await h.client.post("/v1/schedules", json=body("http://x/", target=target))

        # Refused for want of a broker, never for an address.
        assert_problem_names(response, 422, "#/target/type")


# -- host names the HTTP client can encode ------------------------------------------------

LONGEST_LABEL = "a" * 63
# 253 characters: four labels of 63 and one of 1, dot-separated.
LONGEST_NAME = ".".join([LONGEST_LABEL] * 3 + ["b" * 61])

UNENCODABLE_HOSTS = [
    pytest.param("exämple..com", id="empty label with non-ASCII"),
    pytest.param("example..com", id="empty label"),
    pytest.param(".example.com", id="leading dot"),
    pytest.param("\u00ad.example", id="soft hyphen label"),
    pytest.param("a\u00adb.example", id="soft hyphen inside"),
    pytest.param("a\u200bb.example", id="zero-width space"),
    pytest.param("a\u200db.example", id="zero-width joiner"),
    pytest.param("a\ufe0fb.example", id="variation selector"),
    pytest.param("a\U000e0041b.example", id="tag character"),
    pytest.param("a" * 64 + ".example", id="64-character label"),
    pytest.param(LONGEST_NAME + ".c", id="255 characters"),
    pytest.param("a!b.example", id="sub-delimiter"),
    pytest.param("ex%41mple.com", id="percent-encoded"),
    pytest.param("①②⑦.0.0.1", id="non-ASCII digits of a numeric address"),
    pytest.param("exa\u0301\u0301\u0301mple.com\u202e", id="bidi override"),
]


@pytest.mark.parametrize("host", UNENCODABLE_HOSTS)
@ON_MODULE_LOOP
async def test_a_host_the_http_client_cannot_encode_is_refused_at_create_and_patch(
    shared: Harness, host: str
) -> None:
    url = f"http://{host}/hook"
    created = await shared.create(trigger={"type": "cron", "expression": "*/5 * * * *"})

    response = await shared.client.post("/v1/schedules", json=body(url))
    patched = await shared.client.patch(
        f"/v1/schedules/{created['id']}", json={"target": {"type": "webhook", "url": url}}
    )

    assert_problem_names(response, 422, "#/target/url")
    assert_problem_names(patched, 422, "#/target/url")
    assert [s["id"] for s in await stored_schedules(shared)] == [created["id"]]


@pytest.mark.parametrize(
    "host",
    [
        pytest.param("münchen.example", id="non-ASCII"),
        pytest.param("xn--mnchen-3ya.example", id="punycode"),
        pytest.param("MÜNCHEN.Example", id="upper case"),
        pytest.param("example.com.", id="trailing dot"),
        pytest.param(f"{LONGEST_LABEL}.example", id="63-character label"),
        pytest.param(LONGEST_NAME, id="253 characters"),
        pytest.param("_hooks.internal", id="underscore"),
        pytest.param("example\u3002com", id="ideographic full stop"),
    ],
)
@ON_MODULE_LOOP
async def test_a_host_the_http_client_can_encode_is_accepted(shared: Harness, host: str) -> None:
    response = await shared.client.post("/v1/schedules", json=body(f"http://{host}/hook"))

    assert response.status_code == 201, response.text


async def test_a_non_ascii_name_is_checked_as_the_name_deliveries_look_up(
    make_harness: Callable[..., Any],
) -> None:
    # The HTTP client looks up the IDNA 2008 form (xn--fa-hia); the system codec would
    # look up another name (fass.test).
    dns = FakeDNS({"xn--fa-hia.test": [METADATA], "fass.test": ["127.0.0.1"]})
    async with make_harness(dns=dns) as h:
        response = await h.client.post("/v1/schedules", json=body("http://faß.test/x"))

        assert_problem_names(response, 422, "#/target/url")
        assert "denied address" in detail_of(response)
        assert dns.checks == {"xn--fa-hia.test": 1}
        assert await stored_schedules(h) == []
