"""Activity use cases: what happened minute by minute over the last hour or day, of the
fleet or of one tenant, schedule, flow key or endpoint (`app.domain.activity`).

The fleet's and a tenant's, endpoint's or flow key's figures are the roll-up's
(`activity_minutes`, current to within `activity_interval`); a schedule's are read from its
attempt log at once. Each subject is the caller's tenant's: another tenant's is one that
does not exist. The fleet is every tenant's, for an installation's key; a tenant's own key
sees its tenant instead.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from app.domain.activity import Activity, Minute, Scope, Window, every_minute, window_since
from app.domain.endpoints import missing_endpoint
from app.domain.errors import ForbiddenError, NotFoundError
from app.domain.tenants import Caller, key_name, missing_tenant, stored_key
from app.store.dialects import transaction_now
from app.store.engine.database import Connection, Database
from app.store.records.activity import FLEET, rolled_minutes, schedule_minutes
from app.store.records.endpoints import EndpointStore
from app.store.records.schedules import ScheduleStore
from app.store.records.tenants import TenantStore


class ActivityService:
    def __init__(self, database: Database) -> None:
        self._db = database
        self._schedules = ScheduleStore()
        self._endpoints = EndpointStore()
        self._tenants = TenantStore()

    async def read(
        self,
        caller: Caller,
        window: Window,
        *,
        tenant: str | None = None,
        schedule_id: uuid.UUID | None = None,
        flow_key: str | None = None,
        endpoint_id: uuid.UUID | None = None,
    ) -> Activity:
        """The window's minutes of at most one subject (none: the fleet)."""

        async def work(conn: Connection) -> Activity:
            now = await transaction_now(conn)
            since = window_since(now, window)
            until = since + window.span
            scope, subject = await self._subject(
                conn, caller, tenant, schedule_id, flow_key, endpoint_id
            )
            found: list[Minute]
            current: datetime | None
            if scope is Scope.SCHEDULE:
                assert schedule_id is not None
                # Its occurrences due from a window before: a retry logged in the window
                # may be of an occurrence due before it.
                found = await schedule_minutes(
                    conn, schedule_id, since, until, fired=since - window.span
                )
                current = now
            else:
                found, current = await rolled_minutes(conn, scope, subject, since, until)
            return Activity(
                scope=scope,
                subject=None if scope is Scope.FLEET else _shown(scope, subject),
                window=window,
                since=since,
                until=until,
                minutes=every_minute(since, until, found),
                current_to=current,
            )

        return await self._db.run(work)

    async def _subject(
        self,
        conn: Connection,
        caller: Caller,
        tenant: str | None,
        schedule_id: uuid.UUID | None,
        flow_key: str | None,
        endpoint_id: uuid.UUID | None,
    ) -> tuple[Scope, str]:
        """The scope and the stored subject asked for, checked to be the caller's."""
        if schedule_id is not None:
            found = await self._schedules.get(conn, schedule_id)
            if found is None or found.tenant != caller.tenant:
                raise NotFoundError(f"schedule {schedule_id} does not exist")
            return Scope.SCHEDULE, str(schedule_id)
        if flow_key is not None:
            return Scope.FLOW_KEY, stored_key(caller.tenant, flow_key)
        if endpoint_id is not None:
            if not await self._endpoints.exists(conn, caller.tenant, endpoint_id):
                raise missing_endpoint(endpoint_id)
            return Scope.ENDPOINT, str(endpoint_id)
        if tenant is not None:
            if caller.own and tenant != caller.tenant:
                raise ForbiddenError(f"this key acts in tenant {caller.tenant} only")
            if not await self._tenants.exists(conn, tenant):
                raise missing_tenant(tenant)
            return Scope.TENANT, tenant
        if caller.own:  # a tenant's own key: its tenant is its fleet
            return Scope.TENANT, caller.tenant
        return Scope.FLEET, FLEET


def _shown(scope: Scope, subject: str) -> str:
    """The subject as the caller names it (a flow key without its tenant)."""
    return key_name(subject) if scope is Scope.FLOW_KEY else subject
