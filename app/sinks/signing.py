"""Standard Webhooks signatures (HMAC-SHA256 over id.timestamp.body), one per secret so that
receivers can rotate: a receiver verifies the delivery when any one signature is its own."""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable

from app.domain.secrets import signing_key


class WebhookSigner:
    """Signs deliveries with one or more `whsec_`-prefixed base64 secrets, newest first."""

    def __init__(self, secrets: str | Iterable[str]) -> None:
        listed = [secrets] if isinstance(secrets, str) else list(secrets)
        if not listed:
            raise ValueError("a signer needs at least one secret")
        keys = [signing_key(secret) for secret in listed]
        if not all(keys):
            raise ValueError("a signing secret is whsec_ followed by a non-empty base64 key")
        # The keyed state of each HMAC is computed once; a signature copies it.
        self._macs = tuple(hmac.new(key, digestmod=hashlib.sha256) for key in keys)

    def signature(self, message_id: str, timestamp: int, body: bytes) -> str:
        """The `webhook-signature` value: `v1,<base64>` per secret, space-separated."""
        prefix = f"{message_id}.{timestamp}.".encode()
        signatures = []
        for keyed in self._macs:
            mac = keyed.copy()
            mac.update(prefix)
            mac.update(body)
            signatures.append("v1," + base64.b64encode(mac.digest()).decode())
        return " ".join(signatures)
