"""Wire models of /v1/activity: a window's figures minute by minute, and its totals."""

from __future__ import annotations

import math
from datetime import datetime

from pydantic import BaseModel, Field

from app.domain.activity import LATENESS_BOUNDS, Activity, Minute, quantile

_PERCENTILE = (
    "The upper bound in seconds of the lateness bucket holding the {q} percentile of the"
    " deliveries (the lateness is at most this); null when nothing was delivered, or when it"
    " is beyond the last bucket (more than 3600 s)"
)


def _bound(counts: tuple[int, ...], q: float) -> float | None:
    found = quantile(counts, q)
    return None if found is None or math.isinf(found) else found


class MinuteOut(BaseModel):
    at: datetime = Field(description="The minute's first instant (UTC)")
    delivered: int = Field(description="Attempts started in the minute that delivered")
    failed: int = Field(
        description="Attempts started in the minute that did not deliver: retried,"
        " dead-lettered, or lost with their replica"
    )
    dead_lettered: int = Field(description="Of those, the last attempts of their occurrence")
    lateness_p50_seconds: float | None = Field(description=_PERCENTILE.format(q="50th"))
    lateness_p99_seconds: float | None = Field(description=_PERCENTILE.format(q="99th"))

    @classmethod
    def of(cls, minute: Minute) -> MinuteOut:
        return cls(
            at=minute.at,
            delivered=minute.delivered,
            failed=minute.failed,
            dead_lettered=minute.dead_lettered,
            lateness_p50_seconds=_bound(minute.lateness, 0.5),
            lateness_p99_seconds=_bound(minute.lateness, 0.99),
        )


class LatenessBucketOut(BaseModel):
    le: float | None = Field(description="The bucket's upper bound in seconds; null: beyond 3600")
    count: int = Field(description="Deliveries of the window whose lateness fell in the bucket")


class TotalsOut(MinuteOut):
    at: datetime = Field(description="The window's first instant (UTC)")
    lateness_p90_seconds: float | None = Field(description=_PERCENTILE.format(q="90th"))
    lateness_buckets: list[LatenessBucketOut] = Field(
        description="The window's deliveries by lateness (delivered instant minus due"
        " instant), in buckets: every percentile above is read from these"
    )

    @classmethod
    def of(cls, minute: Minute) -> TotalsOut:
        bounds: list[float | None] = [*LATENESS_BOUNDS, None]
        return cls(
            **MinuteOut.of(minute).model_dump(),
            lateness_p90_seconds=_bound(minute.lateness, 0.9),
            lateness_buckets=[
                LatenessBucketOut(le=le, count=count)
                for le, count in zip(bounds, minute.lateness, strict=True)
            ],
        )


class ActivityOut(BaseModel):
    """What happened minute by minute, from the attempt log every replica writes."""

    scope: str = Field(
        description="fleet (every tenant's; a tenant's own key sees its tenant instead),"
        " tenant, schedule, flow_key or endpoint",
        examples=["fleet"],
    )
    subject: str | None = Field(
        description="The tenant, schedule id, flow key or endpoint id; null for the fleet"
    )
    window: str = Field(description="1h or 24h", examples=["1h"])
    since: datetime = Field(description="The first minute's first instant")
    until: datetime = Field(description="The end of the last minute (the current one)")
    step_seconds: int = Field(description="Each entry of minutes is one minute", examples=[60])
    current_to: datetime | None = Field(
        description="When the figures were last brought up to date from the attempt log"
        " (every CHRONOQ_ACTIVITY_INTERVAL seconds; a schedule's at once); null: never yet"
    )
    totals: TotalsOut = Field(
        description="The whole window's figures, its lateness percentiles read from the sum of"
        " its minutes' histograms"
    )
    minutes: list[MinuteOut] = Field(
        description="Every minute of the window, oldest first (zeros where nothing happened);"
        " an attempt counts in the minute it started"
    )

    @classmethod
    def of(cls, activity: Activity) -> ActivityOut:
        return cls(
            scope=activity.scope.value,
            subject=activity.subject,
            window=activity.window.value,
            since=activity.since,
            until=activity.until,
            step_seconds=60,
            current_to=activity.current_to,
            totals=TotalsOut.of(activity.total),
            minutes=[MinuteOut.of(minute) for minute in activity.minutes],
        )
