"""Secrets a target carries: Standard Webhooks signing secrets, credential headers and URL
passwords; which values count as secret, and the redacted forms that responses show.

Redacted forms appear only in responses (`app.api.schemas`); what a write that sends one
back means is `app.domain.placeholders`.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from typing import TypeVar
from urllib.parse import urlsplit, urlunsplit

SECRET_PREFIX = "whsec_"
# What a response shows instead of a secret header value or a URL password.
PLACEHOLDER = "***"
# Header names whose values are credentials, matched case-insensitively: these exactly,
# and any name containing one of the words.
_SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie"})
_SECRET_WORDS = ("token", "secret", "key", "password")
# `whsec_…abcd`: the prefix, an ellipsis, and the last 4 characters of the secret.
REDACTED_SECRET = re.compile(r"whsec_….{4}", re.DOTALL)

V = TypeVar("V")


def signing_key(secret: str) -> bytes:
    """The HMAC key of a Standard Webhooks secret (`whsec_` + base64, padding optional);
    empty when the secret is malformed."""
    if not secret.startswith(SECRET_PREFIX):
        return b""
    encoded = secret.removeprefix(SECRET_PREFIX)
    try:
        return base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except binascii.Error:
        return b""


def redacted_secret(secret: str) -> str:
    """`whsec_…` and the secret's last 4 characters: enough to tell secrets apart."""
    return "whsec_…" + secret[-4:]


def is_secret_header(name: str) -> bool:
    lowered = name.lower()
    return lowered in _SECRET_HEADERS or any(word in lowered for word in _SECRET_WORDS)


def redacted_headers(headers: Mapping[str, V]) -> dict[str, V | str]:
    return {
        name: PLACEHOLDER if is_secret_header(name) else value for name, value in headers.items()
    }


def with_password(url: str, password: str) -> str:
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    user = parts.netloc.rpartition("@")[0].partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{user}:{password}@{host}"))


def url_password(url: str) -> str | None:
    userinfo, at, _ = urlsplit(url).netloc.rpartition("@")
    if not at or ":" not in userinfo:
        return None
    return userinfo.partition(":")[2]


def redacted_url(url: str) -> str:
    """The URL with the password of its userinfo (if any) replaced: `https://user:***@host/`."""
    return url if url_password(url) is None else with_password(url, PLACEHOLDER)


def origin(url: str) -> tuple[str, str, int | None]:
    """Where a URL sends its requests (scheme, host, port); userinfo and path aside."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    return parts.scheme.lower(), (parts.hostname or "").lower(), port
