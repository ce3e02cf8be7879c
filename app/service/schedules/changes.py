"""Changing a schedule (PATCH): fields checked as at create, the change recorded with the
fields it changed, and the next occurrence planned again when its instant, its jitter or
whether it comes at all changes."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import cast

from app.domain.endpoints import delivery_key
from app.domain.errors import ConflictError, InvalidInputError
from app.domain.occurrence import Origin
from app.domain.schedule import (
    NOT_NULLABLE,
    RULE_FIELDS,
    EventKind,
    Schedule,
    SchedulePatch,
    ScheduleStatus,
    check_patch,
)
from app.domain.target import Target
from app.domain.tenants import Caller
from app.domain.trigger import Trigger, check_cadence, first_fire_or_refuse, is_recurring, resolve
from app.service.endpoints import hold_endpoint_targets
from app.service.schedules.checks import BodyChecks, endpoint_flow, kept_secrets, targets_of
from app.service.schedules.steps import ScheduleSteps
from app.service.topics import hold_topic_targets
from app.store.dialects import announce, transaction_now
from app.store.engine.database import Connection, Database
from app.store.engine.wakeups import Wakeups
from app.store.loop import completion
from app.store.schema.rows import new_occurrence

# PATCH fields that change which ticks come, or when: the next occurrence is planned again.
RECOMPUTE = frozenset({"trigger", "jitter_seconds", "max_occurrences"})
# PATCH fields that change the cadence itself: refused once a schedule has finished.
SHAPE = frozenset({"trigger", "max_occurrences"})


def _stored_value(schedule: Schedule, field: str) -> object:
    """A schedule's value of a PATCH field, by the field's name."""
    if field in RULE_FIELDS:
        return getattr(schedule.rules, RULE_FIELDS[field])
    return getattr(schedule, field)


class ScheduleChanges:
    def __init__(
        self, database: Database, steps: ScheduleSteps, checks: BodyChecks, wakeups: Wakeups
    ) -> None:
        self._db = database
        self._steps = steps
        self._checks = checks
        self._wakeups = wakeups

    async def patch(
        self,
        schedule_id: uuid.UUID,
        patch: SchedulePatch,
        if_match: frozenset[int] | None,
        caller: Caller,
    ) -> Schedule:
        changes = patch.model_dump(exclude_unset=True)
        if "payload" in changes:
            self._checks.payload(patch.payload, "#/payload")
        self._checks.targets(patch, "#")
        self._checks.retry(patch.retry, "#/retry")
        await self._checks.urls([(patch, "#")])
        if patch.trigger is not None:
            check_cadence(patch.trigger)
        for field in NOT_NULLABLE:
            if field in changes and changes[field] is None:
                raise InvalidInputError(f"{field} cannot be null", pointer=f"#/{field}")
        recompute = bool(RECOMPUTE & changes.keys())

        async def work(conn: Connection) -> Schedule:
            current = await self._steps.locked(conn, schedule_id, caller.tenant, if_match)
            check_patch(current.status, changes_trigger=bool(SHAPE & changes.keys()))
            now = await transaction_now(conn)
            values: dict[str, object] = {
                field: getattr(patch, field) for field in changes if field != "trigger"
            }
            for field, target in targets_of(patch):
                values[field] = kept_secrets(target, getattr(current, field), f"#/{field}")
            target = cast(Target, values.get("target", current.target))
            flow_key = cast(str | None, values.get("flow_key", current.flow_key))
            endpoint_flow(target, flow_key, "#")
            await hold_endpoint_targets(conn, caller.tenant, [(patch.target, "#/target")])
            await hold_topic_targets(conn, caller.tenant, [(patch.target, "#/target")])
            stored_key = delivery_key(current.tenant, flow_key, target)
            if patch.trigger is not None:
                if not is_recurring(current.trigger) and current.fire_count > 0:
                    raise ConflictError("this one-shot schedule has already fired")
                values["trigger"] = resolve(patch.trigger, now)
            if recompute:
                # The not-yet-fired next occurrence is replaced: its instant, its jitter
                # draw or whether it comes at all changes (one already fired keeps its own).
                await self._replan(conn, current, values, now)
            await self._steps.schedules.update(conn, schedule_id, now, **values)
            if "on_failure" in values and values["on_failure"] is None:
                # No target to tell any more: the callbacks still pending are cancelled.
                await self._steps.occurrences.cancel_callbacks(conn, schedule_id, now)
            if stored_key != delivery_key(current.tenant, current.flow_key, current.target):
                # What has not fired for good moves to the new key, in flight or not: a
                # new flow_key's, or the endpoint's it now targets (or no longer does).
                await self._steps.schedules.set_stored_key(conn, schedule_id, stored_key)
                await self._steps.occurrences.move_to_key(conn, schedule_id, stored_key)
            # What the PATCH changed; a PATCH that changes nothing still makes a version.
            changed = sorted(
                field for field, value in values.items() if value != _stored_value(current, field)
            )
            await self._steps.record(
                conn, current, EventKind.UPDATED, now, caller.actor, fields=changed
            )
            if recompute and current.status is ScheduleStatus.PENDING:
                await completion.finish_recurring(conn, [schedule_id], now, caller.actor)
            return await self._steps.require(conn, schedule_id, caller.tenant)

        return await self._db.run(work)

    async def _replan(
        self, conn: Connection, current: Schedule, values: dict[str, object], now: datetime
    ) -> None:
        trigger = cast(Trigger, values.get("trigger", current.trigger))
        first = first_fire_or_refuse(trigger, now)
        occurrences = self._steps.occurrences
        await occurrences.drop_unfired_cadence(conn, current.id)
        recurring = is_recurring(trigger)
        budget = values.get("max_occurrences", current.rules.max_occurrences)
        if recurring and isinstance(budget, int) and current.rules.fired >= budget:
            return  # the new bound is already spent: the schedule completes
        paused = current.status is ScheduleStatus.PAUSED
        if paused and recurring:
            return  # resume plans the next tick
        jitter = cast(float, values.get("jitter_seconds", current.jitter_seconds))
        flow_key = cast(str | None, values.get("flow_key", current.flow_key))
        row = new_occurrence(
            current.id,
            first,
            now,
            Origin.SCHEDULE,
            delay=self._steps.jitter(jitter),
            flow_key=delivery_key(
                current.tenant, flow_key, cast(Target, values.get("target", current.target))
            ),
        )
        if paused:  # held: resume gives it back its instant
            row["held_until"], row["available_at"] = row["available_at"], None
        await occurrences.insert(conn, [row])
        await announce(conn, self._wakeups, row["available_at"])
