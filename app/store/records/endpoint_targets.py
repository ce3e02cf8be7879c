"""What an attempt sends to an endpoint (`resolve_endpoints`): its request and its live
secrets, newest first, read in the transaction that takes the work: the delivery loop's
claim, and the sender of operator events as it leases them. The endpoints themselves are
made and changed by the endpoints' store (`endpoints`).

Invariants:
- A secret's value is read only here (for an attempt), and answered only by the endpoints'
  create and rotation that made it.
- A secret is live until it expires, for this read and the endpoints' store alike (`secret_live`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.target import EndpointWebhook
from app.store.schema.tables import endpoint_secrets, endpoints

_e = endpoints.c
_s = endpoint_secrets.c


def secret_live(now: datetime) -> sa.ColumnElement[bool]:
    """An endpoint's secret that still signs at `now`: it has no expiry, or one still ahead."""
    return sa.or_(_s.expires_at.is_(None), _s.expires_at > now)


async def resolve_endpoints(
    conn: AsyncConnection, ids: Iterable[uuid.UUID], now: datetime
) -> dict[uuid.UUID, EndpointWebhook]:
    """What an attempt to each endpoint of `ids` sends now: its request and its live
    secrets, newest first. An endpoint that is gone is not in the answer."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    # One round trip: each endpoint with its live secrets, newest first.
    joined = (
        sa.select(endpoints, _s.secret)
        .select_from(
            endpoints.outerjoin(
                endpoint_secrets, sa.and_(_s.endpoint_id == _e.id, secret_live(now))
            )
        )
        .where(_e.id.in_(wanted))
        .order_by(_e.id, _s.id.desc())
    )
    rows = []
    secrets: dict[uuid.UUID, list[str]] = {}
    for row in await conn.execute(joined):
        if row.id not in secrets:
            secrets[row.id] = []
            rows.append(row)
        if row.secret is not None:
            secrets[row.id].append(row.secret)
    return {
        row.id: EndpointWebhook.model_construct(
            type="webhook",
            url=row.url,
            method=row.method,
            headers=dict(row.headers or {}),
            timeout_seconds=row.timeout_seconds,
            signing_secret=None,
            endpoint_id=row.id,
            signing_secrets=tuple(secrets[row.id]),
        )
        for row in rows
    }
