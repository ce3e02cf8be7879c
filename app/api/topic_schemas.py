"""Wire models of /v1/topics and /v1/subscriptions."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.domain.errors import InvalidInputError
from app.domain.limits import MAX_LABEL_VALUE, Id, InputModel, check_text, one_line, without_null
from app.domain.topics import (
    MAX_EVENT_TYPES,
    MAX_MATCH_FIELDS,
    MAX_MATCH_VALUES,
    MAX_TOPIC_DESCRIPTION,
    Subscription,
    SubscriptionSpec,
    Topic,
)

_TOPIC = "The topic's name (1-128 of A-Z a-z 0-9 . _ : -)"
_EVENT_TYPES = (
    "Event types it takes, as globs (* any run of characters, ? one, [abc] one of): "
    f"`invoice.*`; at most {MAX_EVENT_TYPES}; null or left out: every event type"
)
_MATCH = (
    "Top-level fields of the payload it takes: a value must equal the field's (same JSON "
    "type), a list means one of them; every field named must match. At most "
    f"{MAX_MATCH_FIELDS} fields, each list at most {MAX_MATCH_VALUES} strings, numbers, "
    "booleans or nulls; null or left out: any payload"
)
Scalar = str | int | float | bool | None
Glob = Annotated[str, Field(min_length=1, max_length=200), one_line()]


def _checked_match(value: dict[str, Any] | None) -> dict[str, Any] | None:
    if value is None:
        return None
    if len(value) > MAX_MATCH_FIELDS:
        raise ValueError(f"at most {MAX_MATCH_FIELDS} fields")
    for name, wanted in value.items():
        if not name or len(name) > 128:
            raise ValueError("a field name is 1-128 characters")
        check_text(name, f"field name {name[:40]!r}")
        options = wanted if isinstance(wanted, list) else [wanted]
        if isinstance(wanted, list) and not 1 <= len(wanted) <= MAX_MATCH_VALUES:
            raise ValueError(f"field {name!r}: a list of 1-{MAX_MATCH_VALUES} values")
        for option in options:
            if isinstance(option, str):
                check_text(option, f"field {name!r}", max_bytes=MAX_LABEL_VALUE * 4)
    return value


def _checked_globs(value: list[str] | None) -> list[str] | None:
    if value is None:
        return None
    if len(value) != len(set(value)):
        raise ValueError("event types repeat")
    for glob in value:
        opened = glob.find("[")
        if opened >= 0 and "]" not in glob[opened + 2 :]:
            raise ValueError(f"event type glob {glob[:60]!r} opens a [set] it never closes")
    return value


class TopicIn(InputModel):
    """A topic, whole."""

    description: Annotated[str, one_line()] | None = Field(
        default=None,
        max_length=MAX_TOPIC_DESCRIPTION,
        description="Free text about what it carries; null: none",
        examples=["Billing events for every region"],
    )


class TopicOut(BaseModel):
    """A topic and how many subscriptions it has."""

    name: str = Field(description=_TOPIC)
    description: str | None = Field(description="Free text about what it carries")
    subscriptions: int = Field(description="Its subscriptions")
    version: int = Field(description="Grows with every PUT; the ETag, for If-Match")
    created_at: datetime = Field(description="When it was made")
    updated_at: datetime = Field(description="When it last changed")

    @classmethod
    def of(cls, topic: Topic) -> TopicOut:
        return cls(
            name=topic.name,
            description=topic.description,
            subscriptions=topic.subscriptions,
            version=topic.version,
            created_at=topic.created_at,
            updated_at=topic.updated_at,
        )


class SubscriptionIn(InputModel):
    """An endpoint subscribed to a topic, with what it takes."""

    topic: str = Field(
        min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:-]+$", description=_TOPIC
    )
    endpoint_id: Id = Field(description="The endpoint its deliveries go to")
    event_types: list[Glob] | None = Field(
        default=None, min_length=1, max_length=MAX_EVENT_TYPES, description=_EVENT_TYPES
    )
    match: dict[str, Scalar | list[Scalar]] | None = Field(
        default=None,
        json_schema_extra={"maxProperties": MAX_MATCH_FIELDS},
        description=_MATCH,
        examples=[{"region": ["eu", "us"], "tier": "gold"}],
    )

    _match = field_validator("match")(lambda v: _checked_match(v))
    _globs = field_validator("event_types")(lambda v: _checked_globs(v))

    def spec(self) -> SubscriptionSpec:
        return SubscriptionSpec(
            topic=self.topic,
            endpoint_id=self.endpoint_id,
            event_types=None if self.event_types is None else tuple(self.event_types),
            match=self.match,
        )


_NOT_NULLABLE = ("topic", "endpoint_id")


class SubscriptionPatch(InputModel):
    """A partial change of a subscription; absent fields stay as they are."""

    model_config = ConfigDict(json_schema_extra=without_null(_NOT_NULLABLE))

    topic: str | None = Field(
        default=None,
        min_length=1,
        max_length=128,
        pattern=r"^[A-Za-z0-9._:-]+$",
        description=_TOPIC,
    )
    endpoint_id: Id | None = Field(default=None, description="The endpoint its deliveries go to")
    event_types: list[Glob] | None = Field(
        default=None, min_length=1, max_length=MAX_EVENT_TYPES, description=_EVENT_TYPES
    )
    match: dict[str, Scalar | list[Scalar]] | None = Field(
        default=None, json_schema_extra={"maxProperties": MAX_MATCH_FIELDS}, description=_MATCH
    )

    _match = field_validator("match")(lambda v: _checked_match(v))
    _globs = field_validator("event_types")(lambda v: _checked_globs(v))

    def changes(self) -> dict[str, object]:
        sent = self.model_fields_set
        for name in _NOT_NULLABLE:
            if name in sent and getattr(self, name) is None:
                raise InvalidInputError(f"{name} cannot be null", pointer=f"#/{name}")
        changes: dict[str, object] = {name: getattr(self, name) for name in sent}
        if "event_types" in changes and self.event_types is not None:
            changes["event_types"] = tuple(self.event_types)
        return changes


class SubscriptionOut(BaseModel):
    """A subscription."""

    id: uuid.UUID = Field(description="Its id; a delivery's webhook-id derives from it")
    topic: str = Field(description=_TOPIC)
    endpoint_id: uuid.UUID = Field(description="The endpoint its deliveries go to")
    event_types: list[str] | None = Field(description=_EVENT_TYPES)
    match: dict[str, Any] | None = Field(description=_MATCH)
    version: int = Field(description="Grows with every change; the ETag, for If-Match")
    created_at: datetime = Field(description="When it was made")
    updated_at: datetime = Field(description="When it last changed")

    @classmethod
    def of(cls, found: Subscription) -> SubscriptionOut:
        spec = found.spec
        return cls(
            id=found.id,
            topic=spec.topic,
            endpoint_id=spec.endpoint_id,
            event_types=None if spec.event_types is None else list(spec.event_types),
            match=spec.match,
            version=found.version,
            created_at=found.created_at,
            updated_at=found.updated_at,
        )
