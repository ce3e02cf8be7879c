"""Delivery signatures through the real loop (DESIGN 8): every one verifies with the public
`standardwebhooks` library, through a rotation of the service's secrets and with a target's
own secret."""

from __future__ import annotations

import base64
import secrets
from collections.abc import Callable
from typing import Any

import pytest
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from tests.integration.conftest import Harness
from tests.receiver import Received, Reply


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def verifies(secret: str, request: Received) -> bool:
    try:
        Webhook(secret).verify(request.body, request.headers)
    except WebhookVerificationError:
        return False
    return True


async def delivered_once(harness: Harness, **spec: Any) -> Received:
    before = len(harness.receiver.requests)
    await harness.create(**spec)
    await harness.step()
    (request,) = harness.receiver.requests[before:]
    return request


async def test_during_a_rotation_both_an_old_and_a_new_receiver_verify_the_delivery(
    make_harness: Callable[..., Any],
) -> None:
    old, new = new_secret(), new_secret()

    async with make_harness(webhook_signing_secrets=f"{new},{old}") as harness:
        request = await delivered_once(harness, payload={"rotating": True})

    assert len(request.headers["webhook-signature"].split(" ")) == 2
    assert Webhook(old).verify(request.body, request.headers) == {"rotating": True}
    assert Webhook(new).verify(request.body, request.headers) == {"rotating": True}
    assert not verifies(new_secret(), request)
    assert request.headers["webhook-id"] == request.occurrence_id


async def test_the_rotation_procedure_never_leaves_a_receiver_unable_to_verify(
    make_harness: Callable[..., Any],
) -> None:
    """Old secret only; the new one added first in the list; receivers switch; the old one
    removed. At every step a receiver still on the old secret or already on the new one
    verifies as long as the service signs with the one it holds."""
    old, new = new_secret(), new_secret()
    phases = [old, f"{new} {old}", new]
    requests = []

    for configured in phases:
        async with make_harness(webhook_signing_secrets=configured) as harness:
            requests.append(await delivered_once(harness))

    before, during, after = requests
    assert (verifies(old, before), verifies(new, before)) == (True, False)
    assert (verifies(old, during), verifies(new, during)) == (True, True)
    assert (verifies(old, after), verifies(new, after)) == (False, True)


async def test_the_single_secret_setting_still_signs(make_harness: Callable[..., Any]) -> None:
    secret = new_secret()

    async with make_harness(webhook_signing_secret=secret) as harness:
        request = await delivered_once(harness)

    assert verifies(secret, request)
    assert len(request.headers["webhook-signature"].split(" ")) == 1


async def test_a_target_with_its_own_secret_is_signed_with_it_only(
    make_harness: Callable[..., Any],
) -> None:
    old, new, own = new_secret(), new_secret(), new_secret()

    async with make_harness(webhook_signing_secrets=f"{new} {old}") as harness:
        request = await delivered_once(harness, target=harness.webhook(signing_secret=own))
        shared = await delivered_once(harness)

    assert verifies(own, request)
    assert not verifies(new, request)
    assert not verifies(old, request)
    assert len(request.headers["webhook-signature"].split(" ")) == 1
    # Other targets keep the service's secrets.
    assert verifies(new, shared)
    assert verifies(old, shared)
    assert not verifies(own, shared)


async def test_a_target_with_its_own_secret_is_signed_without_service_secrets(
    harness: Harness,
) -> None:
    own = new_secret()

    signed = await delivered_once(harness, target=harness.webhook(signing_secret=own))
    unsigned = await delivered_once(harness)

    assert verifies(own, signed)
    assert "webhook-signature" not in unsigned.headers


@pytest.mark.parametrize("own", [False, True])
async def test_every_attempt_is_signed_afresh_under_the_same_webhook_id(
    make_harness: Callable[..., Any], own: bool
) -> None:
    old, new, target_secret = new_secret(), new_secret(), new_secret()

    async with make_harness(webhook_signing_secrets=f"{new} {old}") as harness:
        harness.receiver.script("/hook", Reply(503))
        extra = {"signing_secret": target_secret} if own else {}
        await harness.create(target=harness.webhook(**extra))

        async def two() -> bool:
            return len(harness.receiver.requests) >= 2

        await harness.step_until(two)

    first, second = harness.receiver.requests
    assert first.headers["webhook-id"] == second.headers["webhook-id"] == first.occurrence_id
    for request in (first, second):
        if own:
            assert verifies(target_secret, request)
            assert not verifies(new, request)
        else:
            assert verifies(old, request)
            assert verifies(new, request)
