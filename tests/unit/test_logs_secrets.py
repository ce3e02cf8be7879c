"""Logs print no target secrets: debug logging leaves out SQL parameters, and a line that
quotes a URL (an exception's text) has its credentials masked."""

from __future__ import annotations

import logging
import sys

import pytest

from app.telemetry.logs import LogFormat, configure


def test_debug_logging_leaves_the_sqlite_driver_at_warning() -> None:
    configure("DEBUG")
    try:
        assert logging.getLogger("aiosqlite").getEffectiveLevel() >= logging.WARNING
        assert logging.getLogger("app").isEnabledFor(logging.DEBUG)
    finally:
        configure("INFO")


def chronoq_handler() -> logging.Handler:
    return next(h for h in logging.getLogger().handlers if getattr(h, "_chronoq", False))


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_a_logged_url_shows_no_password_and_no_secret_query_value(fmt: LogFormat) -> None:
    configure("INFO", fmt)
    try:
        error = ValueError(
            "invalid URL http://alice:s3cr3t-pw@exämple..com/h?token=t0k3n&p=2&sig=s1g"
            " (redirected from https://u5er-t0k3n@h.test/?code=c0d3)"
        )
        record = logging.makeLogRecord(
            {"msg": "delivery raised: %s", "args": (error,), "levelno": logging.WARNING}
        )
        try:
            raise error
        except ValueError:
            record.exc_info = sys.exc_info()

        line = chronoq_handler().format(record)
    finally:
        configure("INFO")

    for secret in ("s3cr3t-pw", "t0k3n", "s1g", "c0d3"):
        assert secret not in line
    assert "alice:***@" in line
    assert "p=2" in line
