"""Request body examples for the OpenAPI document: each one succeeds as it is (Swagger's
"Try it out" sends the first), as often as it is sent: none names a schedule, since names
are unique. Every webhook goes to `chronoq receiver` on its default port, as in the README's
walkthrough, which prints what it gets."""

from __future__ import annotations

from typing import Any

from fastapi.openapi.models import Example

_RECEIVER = "http://127.0.0.1:9000"
_WEBHOOK = {"type": "webhook", "url": f"{_RECEIVER}/hooks/invoice"}
_WEEKDAYS = {"type": "cron", "expression": "0 9 * * 1-5", "timezone": "Europe/Paris"}

_CRON_WEBHOOK: dict[str, Any] = {
    "event_type": "invoice.due",
    "payload": {"invoice_id": "inv_42"},
    "target": _WEBHOOK,
    "trigger": _WEEKDAYS,
    "labels": {"team": "billing"},
}
_DELAYED_WEBHOOK: dict[str, Any] = {
    "event_type": "trial.ending",
    "payload": {"account": "acct_7"},
    "target": {**_WEBHOOK, "url": f"{_RECEIVER}/hooks/trial"},
    "trigger": {"type": "once", "delay_seconds": 3600},
    "max_attempts": 5,
}
# Webhooks only: a RabbitMQ target needs a service configured with a broker.
_INTERVAL_WEBHOOK: dict[str, Any] = {
    "event_type": "report.sent",
    "payload": {"report": "usage"},
    "target": {
        **_WEBHOOK,
        "url": f"{_RECEIVER}/hooks/report",
        "headers": {"X-Team": "analytics"},
        "timeout_seconds": 5,
    },
    "trigger": {"type": "interval", "every_seconds": 900},
    "retry": {"base_delay_seconds": 5, "max_delay_seconds": 600},
    "flow_key": "customer-42",
}

CREATE = {
    "cron": Example(summary="A webhook on weekdays at 09:00 Paris time", value=_CRON_WEBHOOK),
    "once": Example(summary="A webhook once, an hour from now", value=_DELAYED_WEBHOOK),
    "interval": Example(summary="A webhook every 15 minutes", value=_INTERVAL_WEBHOOK),
}
BATCH = {
    "two": Example(
        summary="Two schedules in one transaction",
        value={"items": [_CRON_WEBHOOK, _DELAYED_WEBHOOK]},
    )
}
PATCH = {
    "payload": Example(
        summary="A new payload and more attempts",
        value={"payload": {"invoice_id": "inv_43"}, "max_attempts": 8},
    ),
    "trigger": Example(
        summary="A new trigger (the next occurrence is recomputed)",
        value={"trigger": {"type": "cron", "expression": "30 8 * * 1-5", "timezone": "UTC"}},
    ),
}
BACKFILL = {
    "week": Example(
        summary="The ticks of one past week",
        value={"from": "2026-01-05T00:00:00Z", "to": "2026-01-11T23:59:59Z"},
    )
}
REPLAY = {
    "schedule": Example(
        summary="Every dead letter of one event type",
        value={"event_type": "invoice.due"},
    ),
    "ids": Example(
        summary="Dead letters by occurrence id",
        value={"occurrence_ids": ["7d3f921f-fb95-5f69-85f9-81c248738a1d"]},
    ),
}
FLOW_KEY = {
    "rate": Example(
        summary="50 a second, bursts of 100, 10 in flight",
        value={"rate": 50, "period_seconds": 1, "burst": 100, "parallelism": 10},
    ),
    "fifo": Example(summary="One at a time, in order", value={"ordering": "fifo"}),
}
TENANT = {
    "team": Example(summary="A team's tenant", value={"display_name": "Billing team"}),
    "quotas": Example(
        summary="A customer's tenant with create quotas",
        value={
            "display_name": "Acme Inc",
            "quotas": {"max_schedules": 10000, "max_creates_per_minute": 600},
        },
    ),
    "dispatch": Example(
        summary="A customer's tenant with three times the share and delivery quotas",
        value={
            "display_name": "Globex",
            "weight": 3,
            "quotas": {"max_deliveries_per_second": 200, "max_in_flight": 50},
            "retention_seconds": 604800,
        },
    ),
    "paused": Example(
        summary="A tenant whose deliveries wait", value={"display_name": "Initech", "paused": True}
    ),
}
TENANT_KEY = {
    "write": Example(
        summary="A key for a team's deploys", value={"name": "deploy-bot", "role": "write"}
    ),
    "read": Example(
        summary="A read-only key that expires",
        value={"name": "dashboard", "role": "read", "expires_at": "2030-01-01T00:00:00Z"},
    ),
}
PREVIEW = {
    "cron": Example(
        summary="The next five weekday mornings", value={"trigger": _WEEKDAYS, "count": 5}
    ),
    "interval": Example(
        summary="An interval from a start",
        value={
            "trigger": {
                "type": "interval",
                "every_seconds": 3600,
                "start_at": "2026-01-01T00:00:00Z",
            },
            "after": "2026-01-01T00:00:00Z",
            "count": 3,
        },
    ),
}

ENDPOINT = {
    "limited": Example(
        summary="An endpoint with a secret header, flow limits and a circuit breaker",
        value={
            "url": f"{_RECEIVER}/hooks/billing",
            "headers": {"X-Team": "billing"},
            "timeout_seconds": 5,
            "description": "Billing events for the EU region",
            "flow": {"rate": 50, "parallelism": 10},
            "circuit": {"failure_threshold": 5, "cooldown_seconds": 30},
        },
    ),
    "plain": Example(summary="An endpoint with the defaults", value={"url": f"{_RECEIVER}/hooks"}),
}
ENDPOINT_PATCH = {
    "move": Example(
        summary="A new URL and a slower probe",
        value={
            "url": f"{_RECEIVER}/hooks/billing-v2",
            "circuit": {"failure_threshold": 5, "cooldown_seconds": 60},
        },
    ),
}
ROTATE = {
    "day": Example(summary="A new secret, the old one signing for a day more", value={}),
    "hour": Example(summary="The old one signing for an hour", value={"overlap_seconds": 3600}),
}

TOPIC = {
    "billing": Example(
        summary="A topic for billing events", value={"description": "Billing events"}
    ),
}
SUBSCRIPTION = {
    "eu-invoices": Example(
        summary="An endpoint takes the topic's invoice events of the EU and the US",
        value={
            "topic": "billing",
            "endpoint_id": "0193a3c0-6c1e-7cc2-9d4b-3f1a2b4c5d6e",
            "event_types": ["invoice.*"],
            "match": {"region": ["eu", "us"]},
        },
    ),
}
SUBSCRIPTION_PATCH = {
    "all": Example(summary="Every event type from now on", value={"event_types": None}),
}
