"""A command used wrongly: `chronoq` prints the message and exits 2."""


class UsageError(Exception):
    """The command line itself is wrong (exit 2)."""
