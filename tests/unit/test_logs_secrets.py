"""Debug logging does not print SQL parameters, which hold targets' secrets."""

from __future__ import annotations

import logging

from app.logs import configure


def test_debug_logging_leaves_the_sqlite_driver_at_warning() -> None:
    configure("DEBUG")
    try:
        assert logging.getLogger("aiosqlite").getEffectiveLevel() >= logging.WARNING
        assert logging.getLogger("app").isEnabledFor(logging.DEBUG)
    finally:
        configure("INFO")
