"""What a write that sends a redacted form back means: keep the stored secret.

A client doing GET-modify-PATCH sends back what the response showed: `"***"` for a secret
header or a URL password, `"whsec_…abcd"` for a signing secret. Each such value stands for
the stored one and is replaced by it before anything is stored, so that neither the store
nor a delivery ever sees a placeholder:

- `signing_secret` equal to the stored secret's redacted form keeps the stored secret (any
  other redacted form is refused);
- a secret header (by name, `app.domain.secrets`) whose value is `"***"` keeps the stored
  value of the header of that name, compared case-insensitively;
- a URL password `***` keeps the stored URL's password, and a URL user `***` without a
  password (`https://***@host/`) the stored URL's user, when it has none either;
- a secret query parameter (by name, `app.domain.secrets`) whose value is `***` keeps the
  stored value of the parameter of that name (the first `***` the first stored value, and
  so on when a name repeats).

Headers, URL passwords and query values stand in only while a webhook's URL stays the same
up to its query (scheme, host, port and path: another path on the same host may echo what
it is sent), and a signing secret only while its scheme, host and port stay (it signs, it
is never sent); any RabbitMQ target goes to the one broker. A write that moves the target
elsewhere must send the real values, or it could redirect a credential it cannot read.
Where nothing stored can stand in (a create, another address, a header the stored target
lacks), the write is refused naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from app.domain.secrets import (
    PLACEHOLDER,
    REDACTED_SECRET,
    is_secret_name,
    origin,
    redacted_secret,
    resource,
    secret_query_values,
    url_lone_user,
    url_password,
    with_password,
    with_query_values,
    with_user,
)
from app.domain.target import EndpointTarget, RabbitMQTarget, Target, TopicTarget, WebhookTarget

V = TypeVar("V")


class PlaceholderError(ValueError):
    """A redacted form that no stored value stands in for; `field` is its path below the
    target (`signing_secret`, `url`, `headers/Authorization`)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def keep_stored_secrets(new: Target, stored: Target | None) -> Target:
    """`new` with every placeholder replaced by the stored value it stands for."""
    if isinstance(new, EndpointTarget | TopicTarget):
        return new  # it names an endpoint or a topic, which hold no secret of its own
    if isinstance(new, RabbitMQTarget):
        old_headers = stored.headers if isinstance(stored, RabbitMQTarget) else None
        headers = _headers(new.headers, old_headers)
        return new if headers == new.headers else new.model_copy(update={"headers": headers})
    old = stored if isinstance(stored, WebhookTarget) else None
    here = old if old is not None and resource(old.url) == resource(new.url) else None
    signer = old if old is not None and origin(old.url) == origin(new.url) else None
    update = {
        "url": _url(new.url, here.url if here else None),
        "headers": _headers(new.headers, here.headers if here else None),
        "signing_secret": _signing_secret(
            new.signing_secret,
            signer.signing_secret if signer else None,
            moved=old is not None and signer is None,
        ),
    }
    changed = {key: value for key, value in update.items() if value != getattr(new, key)}
    return new.model_copy(update=changed) if changed else new


def has_placeholders(target: Target) -> bool:
    """Whether `target` carries a redacted form (so a create must be refused)."""
    try:
        keep_stored_secrets(target, None)
    except PlaceholderError:
        return True
    return False


def _url(new: str, stored: str | None) -> str:
    url = new
    if url_password(new) == PLACEHOLDER:
        kept = url_password(stored) if stored is not None else None
        if kept is None:
            raise PlaceholderError(
                "url",
                f"the url's password is the redaction placeholder {PLACEHOLDER!r} and no "
                "stored password stands in for it (one does while the url stays the same up "
                "to its query): send the real password",
            )
        url = with_password(new, kept)
    elif url_lone_user(new) == PLACEHOLDER:
        kept = url_lone_user(stored) if stored is not None else None
        if kept is None:
            raise PlaceholderError(
                "url",
                f"the url's user is the redaction placeholder {PLACEHOLDER!r} and no stored "
                "user (without a password) stands in for it (one does while the url stays the "
                "same up to its query): send the real user",
            )
        url = with_user(new, kept)
    return _query(url, stored)


def _query(new: str, stored: str | None) -> str:
    values: dict[str, list[str]] = {}
    if stored is not None:
        for name, start, end in secret_query_values(stored):
            values.setdefault(name, []).append(stored[start:end])

    def keep(name: str, index: int, value: str) -> str:
        if value != PLACEHOLDER:
            return value
        kept = values.get(name, [])
        if index >= len(kept):
            raise PlaceholderError(
                "url",
                f"the url's query parameter {name[:100]!r} is the redaction placeholder "
                f"{PLACEHOLDER!r} and no stored value stands in for it (one does while the url "
                "stays the same up to its query): send the real value",
            )
        return kept[index]

    return with_query_values(new, keep)


def _headers(new: Mapping[str, V], stored: Mapping[str, V] | None) -> dict[str, V]:
    by_name = {name.lower(): value for name, value in (stored or {}).items()}
    kept: dict[str, V] = {}
    for name, value in new.items():
        if value == PLACEHOLDER and is_secret_name(name):
            if name.lower() not in by_name:
                raise PlaceholderError(
                    f"headers/{name.replace('~', '~0')}",
                    f"header {name!r} is the redaction placeholder {PLACEHOLDER!r} and no "
                    "stored value stands in for it (one does while the url stays the same up "
                    "to its query): send the real value",
                )
            value = by_name[name.lower()]
        kept[name] = value
    return kept


def _signing_secret(new: str | None, stored: str | None, *, moved: bool) -> str | None:
    if new is None or not REDACTED_SECRET.fullmatch(new):
        return new
    if moved:
        raise PlaceholderError(
            "signing_secret",
            "signing_secret is a redacted form, which stands for the stored secret only while "
            "the url keeps its scheme, host and port: send the whole secret (whsec_ followed "
            "by base64)",
        )
    if stored is None or redacted_secret(stored) != new:
        raise PlaceholderError(
            "signing_secret",
            "signing_secret is a redacted form that does not match the stored secret: send "
            "the whole secret (whsec_ followed by base64)",
        )
    return stored
