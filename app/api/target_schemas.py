"""Wire models of targets as responses show them, their secrets redacted: a schedule's
target and on_failure, a dead letter's, a tenant's events target."""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from app.domain.secrets import redacted_headers, redacted_secret, redacted_url
from app.domain.target import EndpointTarget, JsonScalar, Target, TopicTarget, WebhookTarget


class WebhookTargetOut(BaseModel):
    """A webhook target as responses show it. Secrets are redacted: the password of the
    URL's userinfo, the values of the URL's query parameters and of the headers whose names
    contain auth, token, secret, key, pass, credential, signature, session or cookie (any
    case) show as ***. Sent back in a PATCH, a redacted form keeps the stored value while the
    URL stays the same up to its query (scheme, host, port and path); the signing secret's
    while its scheme, host and port stay."""

    type: Literal["webhook"] = Field(description="The target's kind")
    url: str = Field(description="The URL called, its password and secret query values as ***")
    method: Literal["POST", "PUT", "PATCH"] = Field(description="The HTTP method of each delivery")
    headers: dict[str, str] = Field(
        description="Extra request headers, the values of secret ones as ***"
    )
    timeout_seconds: float = Field(description="Seconds an attempt may take")
    signing_secret: str | None = Field(
        description="The target's own signing secret, redacted to whsec_… and its last 4 "
        "characters; null when the service's secrets sign its deliveries"
    )


class RabbitMQTargetOut(BaseModel):
    """A RabbitMQ target as responses show it: secret headers redacted as on webhooks (***,
    kept by a PATCH that sends it back)."""

    type: Literal["rabbitmq"] = Field(description="The target's kind")
    exchange: str = Field(description='The exchange published to; "" is the default exchange')
    routing_key: str = Field(description="The routing key")
    headers: dict[str, JsonScalar] = Field(
        description="Message headers, the values of secret ones as ***"
    )


class EndpointTargetOut(BaseModel):
    """An endpoint target: the endpoint holds the URL, headers and secrets."""

    type: Literal["endpoint"] = Field(description="The target's kind")
    endpoint_id: uuid.UUID = Field(description="The endpoint's id")


class TopicTargetOut(BaseModel):
    """A topic target: each occurrence fans out to the topic's matching subscriptions."""

    type: Literal["topic"] = Field(description="The target's kind")
    topic: str = Field(description="The topic's name")


TargetOut = Annotated[
    WebhookTargetOut | RabbitMQTargetOut | EndpointTargetOut | TopicTargetOut,
    Field(discriminator="type"),
]
AnyTargetOut = WebhookTargetOut | RabbitMQTargetOut | EndpointTargetOut | TopicTargetOut


def target_out(t: Target) -> AnyTargetOut:
    """What a response shows of a target; the stored target keeps the real values."""
    if isinstance(t, EndpointTarget):
        return EndpointTargetOut(type=t.type, endpoint_id=t.endpoint_id)
    if isinstance(t, TopicTarget):
        return TopicTargetOut(type=t.type, topic=t.topic)
    if isinstance(t, WebhookTarget):
        return WebhookTargetOut(
            type=t.type,
            url=redacted_url(t.url),
            method=t.method,
            headers=redacted_headers(t.headers),
            timeout_seconds=t.timeout_seconds,
            signing_secret=redacted_secret(t.signing_secret) if t.signing_secret else None,
        )
    return RabbitMQTargetOut(
        type=t.type,
        exchange=t.exchange,
        routing_key=t.routing_key,
        headers=redacted_headers(t.headers),
    )
