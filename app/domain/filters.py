"""What a list of schedules or of dead letters may be narrowed to: each field given must
match, and one left None matches everything."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from app.domain.schedule import ScheduleStatus


@dataclass(frozen=True, slots=True)
class ScheduleFilter:
    status: ScheduleStatus | None = None
    event_type: str | None = None
    target_type: str | None = None
    name: str | None = None
    labels: dict[str, str] = field(default_factory=dict)  # every one, key and value


@dataclass(frozen=True, slots=True)
class DeadLetterFilter:
    schedule_id: uuid.UUID | None = None
    event_type: str | None = None
