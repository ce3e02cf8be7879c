"""What a schedule's body must satisfy beyond its schema, checked before any transaction:
the payload's size, a broker for a RabbitMQ target, the webhook hosts' addresses, and the
redacted secrets a client sends back."""

from __future__ import annotations

import json
from collections.abc import Sequence

from app.domain.addresses import AddressPolicy
from app.domain.errors import InvalidInputError, PayloadTooLargeError
from app.domain.placeholders import PlaceholderError, keep_stored_secrets
from app.domain.retry import RetrySpec
from app.domain.schedule import SchedulePatch, ScheduleSpec
from app.domain.target import EndpointTarget, Target, WebhookTarget
from app.service.addresses import HostResolver, TargetAddresses
from app.settings import Settings

# json.dumps(value, separators=(",", ":"), ensure_ascii=False), its encoder made once.
_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def kept_secrets(new: Target, stored: Target | None, pointer: str) -> Target:
    """`new` with each redacted form a client sent back replaced by the stored secret
    (`app.domain.placeholders`); one that nothing stored stands for is refused."""
    try:
        return keep_stored_secrets(new, stored)
    except PlaceholderError as exc:
        raise InvalidInputError(str(exc), pointer=f"{pointer}/{exc.field}") from None


# A schedule's fields that hold a target: its deliveries', and its failure callbacks'.
TARGET_FIELDS = ("target", "on_failure")


def targets_of(spec: object) -> list[tuple[str, Target]]:
    """The targets `spec` (a spec, a patch, a schedule) sets, by field name."""
    found = ((field, getattr(spec, field)) for field in TARGET_FIELDS)
    return [(field, target) for field, target in found if target is not None]


def no_redacted_secrets(spec: ScheduleSpec, prefix: str) -> None:
    """A new schedule's targets hold no redacted form: nothing stored stands for one."""
    for field, target in targets_of(spec):
        kept_secrets(target, None, f"{prefix}/{field}")


def endpoint_flow(target: Target | None, flow_key: str | None, pointer: str) -> None:
    """A schedule that targets an endpoint names no flow key: its deliveries count against
    the endpoint's (DESIGN section 15), and its tenant's."""
    if isinstance(target, EndpointTarget) and flow_key is not None:
        raise InvalidInputError(
            "a schedule that targets an endpoint delivers under the endpoint's flow limits: "
            "flow_key must be null (set limits on the endpoint)",
            pointer=f"{pointer}/flow_key",
        )


class BodyChecks:
    """The checks that depend on this service's settings; each refusal names its pointer."""

    def __init__(self, settings: Settings, resolver: HostResolver | None = None) -> None:
        self._settings = settings
        self._addresses = TargetAddresses(AddressPolicy.of(*settings.target_rules()), resolver)

    def payload(self, payload: object, pointer: str) -> None:
        size = len(_COMPACT(payload).encode())
        limit = self._settings.max_payload_bytes
        if size > limit:
            raise PayloadTooLargeError(
                f"payload is {size} bytes; the limit is {limit} (CHRONOQ_MAX_PAYLOAD_BYTES)",
                pointer=pointer,
            )

    def retry(self, retry: RetrySpec | None, pointer: str) -> None:
        """A schedule's own retry policy holds together with the service's settings."""
        if retry is not None:
            retry.check(self._settings.retry_policy(), pointer)

    def targets(self, spec: ScheduleSpec | SchedulePatch, pointer: str) -> None:
        """The targets of `spec` (its `target` and its `on_failure`) that it sets can be
        delivered to: a RabbitMQ one needs a broker configured. `pointer` prefixes each
        field's name."""
        for field, target in targets_of(spec):
            if field == "on_failure" and target.type in ("endpoint", "topic"):
                raise InvalidInputError(
                    "on_failure takes a webhook or a rabbitmq target",
                    pointer=f"{pointer}/{field}/type",
                )
            if target.type == "rabbitmq" and not self._settings.amqp_url:
                raise InvalidInputError(
                    "a rabbitmq target needs AMQP_URL to be configured on the service",
                    pointer=f"{pointer}/{field}/type",
                )
        if isinstance(spec, ScheduleSpec):
            endpoint_flow(spec.target, spec.flow_key, pointer)

    async def urls(self, specs: Sequence[tuple[ScheduleSpec | SchedulePatch, str]]) -> None:
        """Webhook hosts that are, or resolve to, a denied address are refused (DESIGN 8);
        each (spec, pointer prefix) names its URLs as `<prefix>/target/url` and
        `<prefix>/on_failure/url`."""
        # A URL is judged by itself: each distinct one is checked once, at its first item
        # (the same refusal, at the same pointer, as checking every item in order).
        first: dict[str, tuple[WebhookTarget, str]] = {}
        for spec, prefix in specs:
            for field, target in targets_of(spec):
                if isinstance(target, WebhookTarget) and target.url not in first:
                    first[target.url] = (target, f"{prefix}/{field}/url")
        await self._addresses.check(first.values())
