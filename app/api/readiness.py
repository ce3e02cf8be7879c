"""The readiness port: what /readyz asks of the rest of the service.

The API reads it and imports none of what it checks (the database, the broker, the delivery
loop): the composition root builds it from them.
"""

from __future__ import annotations

from typing import Protocol


class Readiness(Protocol):
    async def checks(self) -> dict[str, str]:
        """Each check by name, in the order /readyz reports them: "ok", or what is wrong
        (never where a service lives, nor its credentials)."""
        ...
