"""Who is looking at the console, and the tokens that keep its forms its own.

A browser resends HTTP Basic credentials to this host on any request, a forged cross-site
one included, so a change through the console needs more than the credentials: a token that
only a page of this console could have put into the form. The token is a timestamp and an
HMAC of the key's name and that timestamp, keyed with a secret derived from the API key the
browser presents (every replica with the same keys accepts it, and nobody without the key
can make one) or, when no keys are set, with a random secret of this process.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import Request

from app.api.auth import KeyRing, presented_key
from app.domain.tenants import DEFAULT_TENANT, Caller

# A page left open over a working day still posts; older tokens are refused.
TOKEN_LIFETIME_SECONDS = 12 * 3600
# A token from a clock a little ahead (another replica) is still accepted.
CLOCK_SKEW_SECONDS = 300
_CONTEXT = b"chronoq console form\x00"


@dataclass(frozen=True, slots=True)
class Viewer:
    """The console's user: the API key's name (None when no keys are set), the key itself
    (kept to key the form tokens, never shown) and whether it may change anything."""

    name: str | None
    key: str | None
    can_write: bool
    # The tenant the console shows and acts in, and whether it is the key's own (a
    # tenant's key, which reaches no other).
    tenant: str = DEFAULT_TENANT
    own: bool = False

    @property
    def caller(self) -> Caller:
        return Caller(self.tenant, self.name, own=self.own)

    @property
    def switches(self) -> bool:
        """Whether it may switch tenants: an operator key, or anyone when no keys are set
        (a tenant's key reaches no other tenant)."""
        return not self.own

    @property
    def named_tenant(self) -> str | None:
        """The tenant the console's addresses name (`tenant=`): an operator's when it is
        not the default one; None for the default tenant and for a tenant's key, which
        the key itself names."""
        return None if self.own or self.tenant == DEFAULT_TENANT else self.tenant

    @classmethod
    def of(cls, request: Request, ring: KeyRing) -> Viewer:
        """The viewer the key middleware let through: its key's name and role, and a
        tenant key's tenant (an operator key is in the default tenant, until the address
        names another: `app.ui.tenancy.viewer_of`)."""
        if not ring:
            return cls(name=None, key=None, can_write=True)
        key = presented_key(request.headers.raw)
        found: dict[str, Any] = request.state._state
        name: str | None = found.get("principal")
        if key is None or name is None:
            # The key middleware lets no such request through; were one to arrive, it
            # could read at most.
            return cls(name=None, key=None, can_write=False)
        own: str | None = found.get("key_tenant")
        return cls(
            name=name,
            key=key,
            can_write=not found.get("read_only", True),
            tenant=own or DEFAULT_TENANT,
            own=own is not None,
        )


class FormGuard:
    """Issues and checks the console's form tokens."""

    def __init__(
        self,
        secret: bytes | None = None,
        *,
        lifetime: float = TOKEN_LIFETIME_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._secret = secret or secrets.token_bytes(32)
        self._lifetime = lifetime
        self._clock = clock

    def _signature(self, viewer: Viewer, issued: int) -> str:
        if viewer.key is None:
            secret = self._secret
        else:
            secret = hashlib.sha256(_CONTEXT + viewer.key.encode()).digest()
        message = f"{viewer.name or ''}\x00{issued}".encode()
        return hmac.new(secret, message, hashlib.sha256).hexdigest()

    def issue(self, viewer: Viewer) -> str:
        issued = int(self._clock())
        return f"{issued}.{self._signature(viewer, issued)}"

    def accepts(self, viewer: Viewer, token: str | None) -> bool:
        if not token:
            return False
        issued_text, dot, signature = token.partition(".")
        if not dot or not issued_text.isdigit() or len(issued_text) > 12:
            return False
        issued = int(issued_text)
        age = self._clock() - issued
        if age > self._lifetime or age < -CLOCK_SKEW_SECONDS:
            return False
        return hmac.compare_digest(signature, self._signature(viewer, issued))


REFUSED = "Nothing was saved: the fields marked below are refused."


def beside(refused: dict[str, str], shown: tuple[str, ...]) -> tuple[str, dict[str, str]]:
    """What a page says above a refused form, and the message beside each field of it
    refused: a refusal of no field the form shows is said above it, naming what it refuses."""
    marked = {name: message for name, message in refused.items() if name in shown}
    others = [
        f"{name}: {message}" if name else message
        for name, message in refused.items()
        if name not in shown
    ]
    if not marked:
        return " ".join(others), marked
    return " ".join([REFUSED, *others]), marked
