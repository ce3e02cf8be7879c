"""Targets: where an occurrence is delivered (a webhook or a RabbitMQ exchange)."""

from __future__ import annotations

import re
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

JsonScalar = str | int | float | bool | None

# Headers Chronoq sets itself on every delivery; a target may not override them.
RESERVED_HEADERS = frozenset(
    {
        "content-type",
        "content-length",
        "transfer-encoding",
        "connection",
        "host",
        "idempotency-key",
        "x-occurrence-id",
        "x-schedule-id",
        "x-event-type",
        "x-scheduled-for",
        "x-attempt",
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
    }
)
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")


class WebhookTarget(BaseModel):
    """An HTTP(S) endpoint called with the payload as its JSON body."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["webhook"]
    url: str = Field(max_length=2048)
    method: Literal["POST", "PUT", "PATCH"] = "POST"
    headers: dict[str, str] = Field(default_factory=dict)
    timeout_seconds: float = Field(default=10.0, gt=0)

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("url must be an absolute http:// or https:// URL")
        return value

    @field_validator("headers")
    @classmethod
    def _plain_headers(cls, value: dict[str, str]) -> dict[str, str]:
        for name, header in value.items():
            if not _TOKEN.match(name):
                raise ValueError(f"invalid header name {name!r}")
            if name.lower() in RESERVED_HEADERS:
                raise ValueError(f"header {name!r} is set by Chronoq and cannot be overridden")
            if "\r" in header or "\n" in header:
                raise ValueError(f"header {name!r} contains a line break")
        return value


class RabbitMQTarget(BaseModel):
    """A publish to an exchange with a routing key, confirmed by the broker."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["rabbitmq"]
    exchange: str = Field(default="", max_length=255)
    routing_key: str = ""
    headers: dict[str, JsonScalar] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _routable(self) -> RabbitMQTarget:
        if len(self.routing_key.encode()) > 255:
            raise ValueError("routing_key is longer than 255 bytes")
        if self.exchange == "" and not self.routing_key:
            raise ValueError("routing_key must not be empty with the default exchange")
        return self


Target = Annotated[WebhookTarget | RabbitMQTarget, Field(discriminator="type")]
