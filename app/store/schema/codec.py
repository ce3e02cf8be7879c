"""Stored JSON back into domain values: targets and triggers validated (cached: claims read
them hot), payloads decoded.

Invariant: what the database holds reads back without failing. Definitions are trusted as
they were written (`STORED` skips input rules added since); a payload this decoder cannot
read comes back as None, while deliveries still send its stored text byte for byte.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from pydantic import TypeAdapter

from app.domain.limits import STORED
from app.domain.retry import RetrySpec, raised_to_floor
from app.domain.target import Target
from app.domain.trigger import Trigger

_TARGET: TypeAdapter[Target] = TypeAdapter(Target)
_TRIGGER: TypeAdapter[Trigger] = TypeAdapter(Trigger)


@lru_cache(maxsize=4096)
def _target(text: str) -> Target:
    return _TARGET.validate_json(text, strict=False, context=STORED)


@lru_cache(maxsize=4096)
def _trigger(text: str) -> Trigger:
    return _TRIGGER.validate_json(text, strict=False, context=STORED)


def _key(value: Any) -> str:
    # JSON text from the database is its own cache key: the same schedule always reads
    # back the same text, and equal values spelled differently only cost a cache miss.
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def target(value: Any) -> Target:
    return _target(_key(value))


def optional_target(value: Any) -> Target | None:
    """A target that may be absent (a schedule's `on_failure`)."""
    return None if value is None else target(value)


def trigger(value: Any) -> Trigger:
    return _trigger(_key(value))


_RETRY: TypeAdapter[RetrySpec] = TypeAdapter(RetrySpec)


@lru_cache(maxsize=1024)
def _retry(text: str) -> RetrySpec | None:
    try:
        return _RETRY.validate_python(raised_to_floor(json.loads(text)), strict=False)
    except ValueError:
        return None  # a policy that no longer reads back: the service's applies


def retry(value: Any) -> RetrySpec | None:
    """A schedule's own retry policy (None: the service's, or one that does not read)."""
    if value is None:
        return None
    return _retry(_key(value))


def dump_retry(value: RetrySpec | None) -> dict[str, Any] | None:
    """A retry policy's stored JSON: only what it sets (None: the service's)."""
    return None if value is None else value.model_dump(mode="json", exclude_none=True)


def dump(value: Target | Trigger) -> dict[str, Any]:
    """The JSON form stored in the database."""
    dumped: dict[str, Any] = value.model_dump(mode="json", exclude_none=True)
    return dumped


def dump_optional(value: Target | None) -> dict[str, Any] | None:
    """`dump`, of a value that may be absent."""
    return None if value is None else dump(value)


class JsonText(str):
    """A JSON value already written as text: every dialect writes it as it is into a JSON
    column rather than encoding it again."""


def dump_text(value: Target | Trigger) -> JsonText:
    """`dump` as JSON text, written in one pass by the model's own serializer. The same JSON
    value, though a number may be spelled another way (1e+16 as 1e16): for targets and
    triggers, which are read back as models, never as text."""
    return JsonText(value.model_dump_json(exclude_none=True))


def payload(text: str | None) -> Any:
    """A stored payload from its JSON text, or None when this decoder cannot read it back
    (nested beyond Python's recursion limit, or a number too long to convert)."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None
