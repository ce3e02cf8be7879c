"""Wake-ups: an idle delivery loop sleeps until the earliest instant it knows of, and is
woken early when something becomes due sooner.

A write that makes an occurrence due (a create, a trigger, a replay, a resume, a PATCH, a
backfill) announces how soon, through its dialect (`app.store.dialects.announce`): on
PostgreSQL a `NOTIFY` sent in the write's own transaction reaches every replica's `LISTEN`
connection when, and only if, the write commits; elsewhere the announcement reaches this
process's loop once the write has committed, and other replicas find the work when they
next poll. Announcements are hints: a lost one costs at most one poll interval, since the
loop never sleeps longer than that.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress

Listener = Callable[[float], None]


class Wakeups:
    """This process's end of the announcements: listeners hear "something is due in N
    seconds" (negative: already due)."""

    def __init__(self) -> None:
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def unsubscribe(self, listener: Listener) -> None:
        with suppress(ValueError):
            self._listeners.remove(listener)

    def due_in(self, seconds: float) -> None:
        for listener in list(self._listeners):
            listener(seconds)
