"""The client under the name integrations import it by, `chronoq.client`, is the very client
of `app.client`, which code written against it keeps importing."""

from __future__ import annotations

import app.client
import chronoq.client
from chronoq.client import Client, calls


def test_chronoq_client_holds_every_public_name_of_app_client() -> None:
    assert chronoq.client.__all__ == app.client.__all__
    for name in app.client.__all__:
        assert getattr(chronoq.client, name) is getattr(app.client, name), name
    assert Client is app.client.Client
    assert calls is app.client.calls
