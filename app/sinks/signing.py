"""Standard Webhooks signatures (HMAC-SHA256 over id.timestamp.body)."""

from __future__ import annotations

import base64
import hashlib
import hmac

from app.settings import signing_key


class WebhookSigner:
    """Signs deliveries with a `whsec_`-prefixed base64 secret."""

    def __init__(self, secret: str) -> None:
        self._key = signing_key(secret)
        if not self._key:
            raise ValueError("a signing secret is whsec_ followed by a non-empty base64 key")

    def signature(self, message_id: str, timestamp: int, body: bytes) -> str:
        signed = f"{message_id}.{timestamp}.".encode() + body
        digest = hmac.new(self._key, signed, hashlib.sha256).digest()
        return "v1," + base64.b64encode(digest).decode()
