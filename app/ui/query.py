"""A console page's query string: filter values checked with the API's text rules (a bad
one is refused naming its parameter, never sent to the database), and the links that keep
a page's filters."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

from app.domain.errors import InvalidInputError
from app.domain.limits import MAX_LABEL_KEY, MAX_LABEL_VALUE, check_text

MAX_FILTER_LENGTH = 200


def filter_value(query: Mapping[str, str], name: str) -> str | None:
    """A filter's value: None when the form left it empty."""
    value = query.get(name, "").strip()
    if not value:
        return None
    if len(value) > MAX_FILTER_LENGTH:
        raise InvalidInputError(f"{name} is longer than {MAX_FILTER_LENGTH} characters")
    try:
        check_text(value, name)
    except ValueError as exc:
        raise InvalidInputError(str(exc), parameter=name) from None
    return value


def uuid_value(value: str | None, what: str) -> uuid.UUID | None:
    if value is None:
        return None
    try:
        return uuid.UUID(value)
    except ValueError:
        raise InvalidInputError(f"{what} is not a UUID", parameter=what) from None


def check_label(label: str) -> None:
    """A label filter's text; the API's own parser reads its key:value."""
    if len(label) > MAX_LABEL_KEY + 1 + MAX_LABEL_VALUE:
        raise InvalidInputError("a label filter is a key (63) : value (255) at most")
    try:
        check_text(label, "label")
    except ValueError as exc:
        raise InvalidInputError(str(exc), parameter="label") from None


def link(filters: Mapping[str, Any], **extra: str) -> str:
    """The query string of the page with `filters` (a list: a repeated parameter) and
    `extra`; empty values are left out."""
    pairs: list[tuple[str, str]] = []
    for key, value in {**filters, **extra}.items():
        values: Sequence[str] = value if isinstance(value, list) else [value]
        pairs.extend((key, v) for v in values if v)
    return "?" + urlencode(pairs)
