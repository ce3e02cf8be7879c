"""The one error a configuration that cannot run is refused with."""

from __future__ import annotations


class SettingsError(ValueError):
    """The configuration cannot run; the message names the variable to fix."""


class UsageError(Exception):
    """A command used wrongly: the command line itself is wrong; `chronoq` prints the
    message and exits 2."""
