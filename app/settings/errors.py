"""The one error a configuration that cannot run is refused with."""

from __future__ import annotations


class SettingsError(ValueError):
    """The configuration cannot run; the message names the variable to fix."""
