"""Logging setup: one readable line per event on stderr."""

from __future__ import annotations

import logging


def configure(level: str = "INFO") -> None:
    root = logging.getLogger()
    if not any(getattr(h, "_chronoq", False) for h in root.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        handler._chronoq = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    root.setLevel(level)
    logging.getLogger("aiormq").setLevel(max(logging.WARNING, root.level))
    # Each failed reconnect is an ERROR there; the RabbitMQ sink logs one warning instead.
    logging.getLogger("aiormq.connection").setLevel(logging.CRITICAL)
