"""Standard Webhooks signatures, checked with the public `standardwebhooks` library (DESIGN 5)."""

from __future__ import annotations

import base64
import json
import secrets
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from app.domain.occurrence import Delivery
from app.domain.target import WebhookTarget
from app.sinks.signing import WebhookSigner
from app.sinks.webhook import WebhookSink
from tests import factories

BODY = b'{"invoice": 42, "customer": "Z\xc3\xbcrich"}'
MESSAGE_ID = "6f1d2c3b-4a59-5e8f-9d0c-1b2a3c4d5e6f"


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def signed_headers(secret: str, body: bytes, message_id: str = MESSAGE_ID) -> dict[str, str]:
    timestamp = int(time.time())
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": WebhookSigner(secret).signature(message_id, timestamp, body),
    }


def test_a_signature_verifies_with_standardwebhooks() -> None:
    secret = new_secret()

    payload = Webhook(secret).verify(BODY, signed_headers(secret, BODY))

    assert payload == json.loads(BODY)


def test_the_signature_is_v1_followed_by_a_base64_sha256() -> None:
    signature = WebhookSigner(new_secret()).signature(MESSAGE_ID, 1_700_000_000, BODY)

    version, digest = signature.split(",")
    assert version == "v1"
    assert len(base64.b64decode(digest, validate=True)) == 32


def test_the_signature_equals_the_one_standardwebhooks_computes() -> None:
    secret = new_secret()
    timestamp = 1_700_000_000

    ours = WebhookSigner(secret).signature(MESSAGE_ID, timestamp, BODY)
    theirs = Webhook(secret).sign(MESSAGE_ID, datetime.fromtimestamp(timestamp, UTC), BODY.decode())

    assert ours == theirs


@pytest.mark.parametrize(
    "altered",
    [
        b'{"invoice": 43, "customer": "Z\xc3\xbcrich"}',
        BODY + b" ",
        b"",
    ],
)
def test_an_altered_body_fails_verification(altered: bytes) -> None:
    secret = new_secret()
    headers = signed_headers(secret, BODY)

    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(altered, headers, json_parse=False)


def test_another_message_id_fails_verification() -> None:
    secret = new_secret()
    headers = signed_headers(secret, BODY) | {"webhook-id": str(uuid.uuid4())}

    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(BODY, headers)


def test_another_secret_fails_verification() -> None:
    headers = signed_headers(new_secret(), BODY)

    with pytest.raises(WebhookVerificationError):
        Webhook(new_secret()).verify(BODY, headers)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


@given(json_values)
def test_any_json_payload_signs_verifiably(value: object) -> None:
    secret = "whsec_" + base64.b64encode(b"k" * 24).decode()
    body = json.dumps(value, ensure_ascii=False).encode()

    assert Webhook(secret).verify(body, signed_headers(secret, body)) == value


def make_delivery(**overrides: Any) -> Delivery:
    defaults: dict[str, Any] = {
        "occurrence_id": uuid.UUID(MESSAGE_ID),
        "body": BODY,
        "one_shot": False,
    }
    return factories.make_delivery(**{**defaults, **overrides})


def sink_headers(secret: str | None, delivery: Delivery) -> dict[str, str]:
    sink = WebhookSink(concurrency=1, max_timeout=10, signing_secret=secret)
    assert isinstance(delivery.target, WebhookTarget)
    return sink.headers(delivery, delivery.target)


def test_the_sink_headers_of_a_signed_delivery_verify() -> None:
    secret = new_secret()
    delivery = make_delivery()

    headers = sink_headers(secret, delivery)

    assert Webhook(secret).verify(delivery.body, headers) == json.loads(BODY)
    assert headers["webhook-id"] == str(delivery.occurrence_id)
    assert abs(int(headers["webhook-timestamp"]) - time.time()) < 60


def test_the_webhook_id_stays_the_occurrence_id_across_attempts() -> None:
    secret = new_secret()

    first = sink_headers(secret, make_delivery(attempt=1))
    third = sink_headers(secret, make_delivery(attempt=3))

    assert first["webhook-id"] == third["webhook-id"] == MESSAGE_ID


def test_the_sink_headers_of_an_altered_body_fail_verification() -> None:
    secret = new_secret()
    headers = sink_headers(secret, make_delivery())

    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(b'{"invoice": 0}', headers)


def test_without_a_secret_no_signature_headers_are_sent() -> None:
    headers = sink_headers(None, make_delivery())

    assert not {"webhook-id", "webhook-timestamp", "webhook-signature"} & {
        name.lower() for name in headers
    }
