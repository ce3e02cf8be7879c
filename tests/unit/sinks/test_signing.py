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
from app.settings import SettingsError, load_settings
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


def sink_headers(secret: str | list[str] | None, delivery: Delivery) -> dict[str, str]:
    secrets_ = [secret] if isinstance(secret, str) else secret or []
    sink = WebhookSink(concurrency=1, max_timeout=10, signing_secrets=secrets_)
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


# -- rotation: one signature per secret -------------------------------------------------


def test_each_secret_adds_one_signature_in_the_order_given() -> None:
    newest, oldest = new_secret(), new_secret()
    timestamp = 1_700_000_000

    both = WebhookSigner([newest, oldest]).signature(MESSAGE_ID, timestamp, BODY)

    assert both.split(" ") == [
        WebhookSigner(newest).signature(MESSAGE_ID, timestamp, BODY),
        WebhookSigner(oldest).signature(MESSAGE_ID, timestamp, BODY),
    ]


def test_during_a_rotation_a_receiver_of_either_secret_verifies_the_same_headers() -> None:
    old, new = new_secret(), new_secret()
    headers = sink_headers([new, old], make_delivery())

    assert Webhook(old).verify(BODY, headers) == json.loads(BODY)
    assert Webhook(new).verify(BODY, headers) == json.loads(BODY)
    with pytest.raises(WebhookVerificationError):
        Webhook(new_secret()).verify(BODY, headers)


def test_a_signer_signs_the_same_message_alike_every_time() -> None:
    signer = WebhookSigner([new_secret(), new_secret()])

    first = signer.signature(MESSAGE_ID, 1_700_000_000, BODY)

    assert signer.signature(MESSAGE_ID, 1_700_000_000, BODY) == first
    assert signer.signature(MESSAGE_ID, 1_700_000_001, BODY) != first


@pytest.mark.parametrize("secrets_", [[], ["whsec_"], ["whsec_not-base64!"], ["c2VjcmV0"]])
def test_a_signer_refuses_no_secret_or_a_malformed_one(secrets_: list[str]) -> None:
    with pytest.raises(ValueError, match="secret"):
        WebhookSigner(secrets_)


def test_a_target_with_its_own_secret_is_signed_with_it_only() -> None:
    own, global_ = new_secret(), new_secret()
    target = WebhookTarget(type="webhook", url="http://127.0.0.1:9/hook", signing_secret=own)
    delivery = make_delivery(target=target)

    headers = sink_headers([global_], delivery)

    assert len(headers["webhook-signature"].split(" ")) == 1
    assert Webhook(own).verify(BODY, headers) == json.loads(BODY)
    with pytest.raises(WebhookVerificationError):
        Webhook(global_).verify(BODY, headers)


def test_a_target_with_its_own_secret_is_signed_when_no_global_secret_is_set() -> None:
    own = new_secret()
    target = WebhookTarget(type="webhook", url="http://127.0.0.1:9/hook", signing_secret=own)
    delivery = make_delivery(target=target)

    assert Webhook(own).verify(BODY, sink_headers(None, delivery)) == json.loads(BODY)


# -- settings ---------------------------------------------------------------------------


@pytest.mark.parametrize("separator", [",", " ", ", ", " , "])
def test_the_secrets_list_reads_comma_or_space_separated_newest_first(
    monkeypatch: pytest.MonkeyPatch, separator: str
) -> None:
    newest, oldest = new_secret(), new_secret()
    monkeypatch.setenv("CHRONOQ_WEBHOOK_SIGNING_SECRETS", f" {newest}{separator}{oldest} ")

    assert load_settings().webhook_secrets == (newest, oldest)


def test_the_single_secret_still_signs(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = new_secret()
    monkeypatch.setenv("CHRONOQ_WEBHOOK_SIGNING_SECRET", secret)

    assert load_settings().webhook_secrets == (secret,)


@pytest.mark.parametrize("value", ["", " ", ","])
def test_an_empty_secrets_list_means_unsigned(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("CHRONOQ_WEBHOOK_SIGNING_SECRETS", value)

    assert load_settings().webhook_secrets == ()


def test_both_secret_variables_set_are_refused_naming_both(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CHRONOQ_WEBHOOK_SIGNING_SECRETS", new_secret())
    monkeypatch.setenv("CHRONOQ_WEBHOOK_SIGNING_SECRET", new_secret())

    with pytest.raises(SettingsError) as refused:
        load_settings()

    message = str(refused.value)
    assert "CHRONOQ_WEBHOOK_SIGNING_SECRETS" in message
    assert "CHRONOQ_WEBHOOK_SIGNING_SECRET " in message


@pytest.mark.parametrize(
    ("second", "why"),
    [("whsec_not-base64!", "entry 2 must be whsec_"), ("c2VjcmV0", "entry 2 must be whsec_")],
)
def test_a_malformed_list_entry_is_refused_by_position_without_echoing_it(
    monkeypatch: pytest.MonkeyPatch, second: str, why: str
) -> None:
    first = new_secret()
    monkeypatch.setenv("CHRONOQ_WEBHOOK_SIGNING_SECRETS", f"{first},{second}")

    with pytest.raises(SettingsError, match=why) as refused:
        load_settings()

    assert first not in str(refused.value)
    assert second not in str(refused.value)


def test_a_repeated_list_entry_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = new_secret()
    monkeypatch.setenv("CHRONOQ_WEBHOOK_SIGNING_SECRETS", f"{secret} {secret}")

    with pytest.raises(SettingsError, match="entry 2 repeats"):
        load_settings()


def test_the_secrets_do_not_show_in_the_settings_repr(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = new_secret()
    monkeypatch.setenv("CHRONOQ_WEBHOOK_SIGNING_SECRETS", secret)

    assert secret not in repr(load_settings())
