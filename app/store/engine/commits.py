"""What runs once a `Database.run` transaction has committed: the news of a write (a
wake-up) must not reach a loop before the write it announces can be read."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar

# Callbacks to run once the current `Database.run` transaction has committed.
AFTER_COMMIT: ContextVar[list[Callable[[], None]] | None] = ContextVar(
    "chronoq_after_commit", default=None
)


def after_commit(callback: Callable[[], None]) -> None:
    """Run `callback` once the enclosing `Database.run` transaction commits (at once when
    there is none); a transaction that fails drops it."""
    pending = AFTER_COMMIT.get()
    if pending is None:
        callback()
    else:
        pending.append(callback)
