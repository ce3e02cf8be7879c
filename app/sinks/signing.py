"""Standard Webhooks signatures (HMAC-SHA256 over id.timestamp.body)."""

from __future__ import annotations

import base64
import hashlib
import hmac


class WebhookSigner:
    """Signs deliveries with a `whsec_`-prefixed base64 secret."""

    def __init__(self, secret: str) -> None:
        self._key = base64.b64decode(secret.removeprefix("whsec_"))

    def signature(self, message_id: str, timestamp: int, body: bytes) -> str:
        signed = f"{message_id}.{timestamp}.".encode() + body
        digest = hmac.new(self._key, signed, hashlib.sha256).digest()
        return "v1," + base64.b64encode(digest).decode()
