"""Which target values are secret, their redacted forms, and what a write sending a redacted
form back keeps (app.domain.secrets, app.domain.placeholders)."""

from __future__ import annotations

import pytest

from app.domain.placeholders import PlaceholderError, keep_stored_secrets
from app.domain.secrets import (
    PLACEHOLDER,
    is_secret_name,
    redacted_headers,
    redacted_secret,
    redacted_url,
    scrub_credentials,
)
from app.domain.target import RabbitMQTarget, WebhookTarget

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
OTHER_SECRET = "whsec_c2Vjb25kIHNlY3JldCBrZXkgZm9yIHRlc3Rz"


@pytest.mark.parametrize(
    "name",
    [
        "Authorization",
        "authorization",
        "Proxy-Authorization",
        "Cookie",
        "X-Api-Key",
        "X-Auth-Token",
        "Client-Secret",
        "X-PASSWORD",
        "apikey",
        "X-Auth",
        "X-Credential",
        "Api-Signature",
        "X-Pass",
        "X-Session-Id",
        "Set-Cookie2x",
        "x-amz-security-token",
        "X-AUTHENTICATION",
        "X-Jwt",
        "X-Bearer",
        "X-Hmac",
        "X-Sig",
        "X-Otp",
        "X-Pwd",
        "sig",
        "jwt",
        "pwd",
        "code",
        "auth_code",
        "otpCode",
        "X-OTP",
        "Hmac-Sha256",
    ],
)
def test_credential_headers_are_secret(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "X-Tenant",
        "Accept",
        "X-Request-Id",
        "User-Agent",
        "X-Trace",
        # The short words as parts of other words.
        "X-Design",
        "X-Signal",
        "Footprint",
        "X-Encoded-By",
        "Barcode",
    ],
)
def test_other_headers_are_not_secret(name: str) -> None:
    assert not is_secret_name(name)


def test_redacted_headers_hide_only_the_secret_values() -> None:
    shown = redacted_headers({"Authorization": "Bearer abc", "X-Tenant": "acme"})

    assert shown == {"Authorization": PLACEHOLDER, "X-Tenant": "acme"}


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://user:pa55@example.com/hook", "https://user:***@example.com/hook"),
        ("https://user:p%40ss@example.com:8443/h?q=1", "https://user:***@example.com:8443/h?q=1"),
        ("https://:pa55@example.com/", "https://:***@example.com/"),
        # A user without a password is a credential too: token-in-URL services take one.
        ("https://user@example.com/", "https://***@example.com/"),
        ("https://t0k3n@example.com:8443/h?q=1", "https://***@example.com:8443/h?q=1"),
        ("https://@example.com/", "https://@example.com/"),
        ("https://example.com/hook", "https://example.com/hook"),
        ("http://u:p@[::1]:8080/", "http://u:***@[::1]:8080/"),
    ],
)
def test_a_url_shows_its_userinfo_password_redacted(url: str, shown: str) -> None:
    assert redacted_url(url) == shown


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://h.test/a?token=t0k&page=2", "https://h.test/a?token=***&page=2"),
        ("https://h.test/a?page=2&api_key=k3y", "https://h.test/a?page=2&api_key=***"),
        (
            "https://h.test/a?X-Amz-Signature=abc&X-Amz-Date=1",
            "https://h.test/a?X-Amz-Signature=***&X-Amz-Date=1",
        ),
        ("https://h.test/a?access%5Ftoken=t0k", "https://h.test/a?access%5Ftoken=***"),
        (
            "https://h.test/a?Session=s&sessionid=t&PASS=p",
            "https://h.test/a?Session=***&sessionid=***&PASS=***",
        ),
        ("https://h.test/a?token=a;b=c&d=e", "https://h.test/a?token=***&d=e"),
        ("https://h.test/a?x=1;token=abc&d=e", "https://h.test/a?x=1;token=***&d=e"),
        ("https://h.test/a?token=t&token=u", "https://h.test/a?token=***&token=***"),
        ("https://h.test/a?token", "https://h.test/a?token"),
        ("https://h.test/a?token=", "https://h.test/a?token=***"),
        ("https://h.test/a?q=token&page=key", "https://h.test/a?q=token&page=key"),
        ("https://h.test/a?token=t#frag", "https://h.test/a?token=***#frag"),
        ("https://h.test/a#x?token=t", "https://h.test/a#x?token=t"),
        ("https://u:p@h.test/a?secret=s&v=1", "https://u:***@h.test/a?secret=***&v=1"),
        ("https://h.test/a?tok%C3%A9n=x&cl\u00e9=y", "https://h.test/a?tok%C3%A9n=x&cl\u00e9=y"),
        ("https://h.test/a?API-KEY=%E2%9C%93", "https://h.test/a?API-KEY=***"),
        (
            "https://h.test/a?sig=1&jwt=2&pwd=3&code=4&design=5",
            "https://h.test/a?sig=***&jwt=***&pwd=***&code=***&design=5",
        ),
    ],
)
def test_a_url_shows_the_values_of_its_secret_query_parameters_redacted(
    url: str, shown: str
) -> None:
    assert redacted_url(url) == shown


@pytest.mark.parametrize(
    ("text", "scrubbed"),
    [
        ("http://u:pa55@h.test/a", "http://u:***@h.test/a"),
        (
            "InvalidUrlClientError: https://alice:s3cr3t@exämple..com/hook",
            "InvalidUrlClientError: https://alice:***@exämple..com/hook",
        ),
        ("URL('http://u:p@ss@h.test:81/x')", "URL('http://u:***@h.test:81/x')"),
        ("http://u:p%40ss@h.test", "http://u:***@h.test"),
        (
            "http://:pw@h.test and HTTPS://v:pw2@other.test/",
            "http://:***@h.test and HTTPS://v:***@other.test/",
        ),
        (
            "http://u:pw@h.test?next=http://w:pw3@x.test",
            "http://u:***@h.test?next=http://w:***@x.test",
        ),
        (
            "GET http://h.test/a?token=t0k&page=2 failed",
            "GET http://h.test/a?token=***&page=2 failed",
        ),
        ("'http://h.test/a?api_key=k3y'", "'http://h.test/a?api_key=***'"),
        ("http://t0k3n@h.test/ (no password)", "http://***@h.test/ (no password)"),
        ("GET https://h.test/a?code=c0d3 failed", "GET https://h.test/a?code=*** failed"),
        ("mail bob@example.com about http://h.test/", "mail bob@example.com about http://h.test/"),
        ("no url here: a:b@c", "no url here: a:b@c"),
        ("", ""),
        ("http://u:pw\n@h.test", "http://u:***@h.test"),
    ],
)
def test_scrub_credentials_redacts_the_credentials_of_every_url_in_a_text(
    text: str, scrubbed: str
) -> None:
    assert scrub_credentials(text) == scrubbed


@pytest.mark.parametrize("password", ["p\tw", "p w", "p\x00w", "pé\u200bw", "p'w", "p)w"])
def test_scrub_credentials_leaves_no_part_of_a_password_after_the_user(password: str) -> None:
    scrubbed = scrub_credentials(f"failed: http://alice:{password}@h.test/x")

    assert scrubbed == "failed: http://alice:***@h.test/x"


def test_a_signing_secret_shows_its_last_four_characters() -> None:
    assert redacted_secret(SECRET) == "whsec_…LaSw"


def webhook(**fields: object) -> WebhookTarget:
    return WebhookTarget.model_validate({"type": "webhook", "url": "https://h.test/a", **fields})


def test_a_redacted_form_sent_back_keeps_every_stored_secret() -> None:
    stored = webhook(
        url="https://u:pa55@h.test/a",
        headers={"X-Api-Key": "abc", "X-Tenant": "acme"},
        signing_secret=SECRET,
    )
    sent = webhook(
        url="https://u:***@h.test/a?page=2",
        headers={"x-api-key": PLACEHOLDER, "X-Tenant": "beta"},
        signing_secret=redacted_secret(SECRET),
        timeout_seconds=3,
    )

    kept = keep_stored_secrets(sent, stored)

    assert isinstance(kept, WebhookTarget)
    assert kept.url == "https://u:pa55@h.test/a?page=2"
    assert kept.headers == {"x-api-key": "abc", "X-Tenant": "beta"}
    assert kept.signing_secret == SECRET
    assert kept.timeout_seconds == 3


def test_a_redacted_url_user_sent_back_keeps_the_stored_user() -> None:
    kept = keep_stored_secrets(
        webhook(url="https://***@h.test/a?page=2"), webhook(url="https://t0k3n@h.test/a")
    )

    assert isinstance(kept, WebhookTarget)
    assert kept.url == "https://t0k3n@h.test/a?page=2"


@pytest.mark.parametrize("stored", ["https://h.test/a", "https://u:pa55@h.test/a"])
def test_a_redacted_url_user_that_no_stored_user_stands_for_is_refused(stored: str) -> None:
    with pytest.raises(PlaceholderError) as refused:
        keep_stored_secrets(webhook(url="https://***@h.test/a"), webhook(url=stored))

    assert refused.value.field == "url"


def test_a_redacted_query_value_sent_back_keeps_the_stored_one() -> None:
    stored = webhook(url="https://h.test/a?token=t1&page=1&token=t2&api_key=k")
    sent = webhook(url="https://h.test/a?page=2&token=***&token=***&api_key=new")

    kept = keep_stored_secrets(sent, stored)

    assert isinstance(kept, WebhookTarget)
    assert kept.url == "https://h.test/a?page=2&token=t1&token=t2&api_key=new"


@pytest.mark.parametrize(
    "url",
    [
        "https://h.test/a?token=t1&token=***",
        "https://h.test/a?api_key=***",
        "https://h.test/a?TOKEN=***",
    ],
)
def test_a_redacted_query_value_nothing_stored_stands_for_is_refused(url: str) -> None:
    stored = webhook(url="https://h.test/a?token=t1")

    with pytest.raises(PlaceholderError) as refused:
        keep_stored_secrets(webhook(url=url), stored)

    assert refused.value.field == "url"


def test_a_new_value_replaces_the_stored_one() -> None:
    stored = webhook(headers={"Authorization": "Bearer abc"}, signing_secret=SECRET)
    sent = webhook(headers={"Authorization": "Bearer new"}, signing_secret=OTHER_SECRET)

    assert keep_stored_secrets(sent, stored) == sent


@pytest.mark.parametrize(
    ("sent", "field"),
    [
        ({"headers": {"Authorization": PLACEHOLDER}}, "headers/Authorization"),
        ({"url": "https://u:***@h.test/a"}, "url"),
        ({"url": "https://h.test/a?token=***"}, "url"),
        ({"signing_secret": "whsec_…LaSw"}, "signing_secret"),
    ],
)
def test_a_placeholder_with_nothing_stored_is_refused_naming_the_field(
    sent: dict[str, object], field: str
) -> None:
    with pytest.raises(PlaceholderError) as refused:
        keep_stored_secrets(webhook(**sent), None)

    assert refused.value.field == field


def test_another_redacted_form_than_the_stored_one_is_refused() -> None:
    with pytest.raises(PlaceholderError, match="signing_secret"):
        keep_stored_secrets(webhook(signing_secret="whsec_…abcd"), webhook(signing_secret=SECRET))


ELSEWHERE = ["https://elsewhere.test/a", "http://h.test/a", "https://h.test:8443/a"]
# The same host and port: another path there may echo what it is sent.
OTHER_PATHS = ["https://h.test/echo", "https://h.test/a/", "https://h.test/A", "https://h.test/"]


@pytest.mark.parametrize("url", ELSEWHERE + OTHER_PATHS)
def test_placeholders_do_not_follow_the_target_to_another_address(url: str) -> None:
    stored = webhook(headers={"Authorization": "Bearer abc"})

    with pytest.raises(PlaceholderError, match="Authorization"):
        keep_stored_secrets(webhook(url=url, headers={"Authorization": PLACEHOLDER}), stored)


@pytest.mark.parametrize("path", ["/echo", "/a/", "/a/../echo", "/%61"])
@pytest.mark.parametrize(
    ("stored_url", "sent_url"),
    [
        ("https://u:pa55@h.test/a", "https://u:***@h.test{path}"),
        ("https://h.test/a?token=t0k", "https://h.test{path}?token=***"),
    ],
    ids=["password", "query"],
)
def test_url_placeholders_do_not_follow_the_target_to_another_path(
    stored_url: str, sent_url: str, path: str
) -> None:
    with pytest.raises(PlaceholderError) as refused:
        keep_stored_secrets(webhook(url=sent_url.format(path=path)), webhook(url=stored_url))

    assert refused.value.field == "url"


@pytest.mark.parametrize(
    ("stored_url", "sent_url"),
    [
        ("https://h.test/a", "https://h.test:443/a"),
        ("http://h.test", "http://h.test:80/"),
        ("https://H.Test/a", "https://h.test/a?page=2#top"),
    ],
)
def test_the_same_address_spelt_otherwise_keeps_the_stored_values(
    stored_url: str, sent_url: str
) -> None:
    stored = webhook(url=stored_url, headers={"Authorization": "Bearer abc"})

    kept = keep_stored_secrets(
        webhook(url=sent_url, headers={"Authorization": PLACEHOLDER}), stored
    )

    assert isinstance(kept, WebhookTarget)
    assert kept.headers == {"Authorization": "Bearer abc"}


@pytest.mark.parametrize("url", OTHER_PATHS)
def test_a_signing_secret_placeholder_follows_the_target_to_another_path(url: str) -> None:
    stored = webhook(signing_secret=SECRET)

    kept = keep_stored_secrets(webhook(url=url, signing_secret=redacted_secret(SECRET)), stored)

    assert isinstance(kept, WebhookTarget)
    assert kept.signing_secret == SECRET


@pytest.mark.parametrize("url", ELSEWHERE)
def test_a_signing_secret_placeholder_does_not_follow_the_target_to_another_origin(
    url: str,
) -> None:
    stored = webhook(signing_secret=SECRET)

    with pytest.raises(PlaceholderError) as refused:
        keep_stored_secrets(webhook(url=url, signing_secret=redacted_secret(SECRET)), stored)

    assert refused.value.field == "signing_secret"


def test_a_placeholder_in_a_header_that_is_not_secret_is_a_value() -> None:
    sent = webhook(headers={"X-Mode": PLACEHOLDER})

    assert keep_stored_secrets(sent, None) == sent


def test_rabbitmq_header_placeholders_keep_the_stored_values() -> None:
    stored = RabbitMQTarget(type="rabbitmq", routing_key="a", headers={"x-token": "t0k"})
    sent = RabbitMQTarget(type="rabbitmq", routing_key="b", headers={"x-token": PLACEHOLDER})

    kept = keep_stored_secrets(sent, stored)
    assert isinstance(kept, RabbitMQTarget)
    assert kept.headers == {"x-token": "t0k"}


@pytest.mark.parametrize("secret", ["whsec_", "whsec_not-base64!", "c2VjcmV0", "whsec_…"])
def test_a_target_refuses_a_signing_secret_without_a_usable_key(secret: str) -> None:
    with pytest.raises(ValueError, match="signing_secret"):
        webhook(signing_secret=secret)
