"""The console's form tokens: bound to a key, they expire, and replicas agree on them."""

from __future__ import annotations

from app.ui.forms import FormGuard, Viewer
from tests.integration.ui.pages import WRITER


def test_a_token_expires_and_one_from_the_future_is_refused() -> None:
    now = [1_000_000.0]
    guard = FormGuard(b"k" * 32, lifetime=3600, clock=lambda: now[0])
    viewer = Viewer(name="ops", key=WRITER, can_write=True)
    token = guard.issue(viewer)
    assert guard.accepts(viewer, token)
    now[0] += 3601
    assert not guard.accepts(viewer, token)
    now[0] -= 3601 + 3600
    assert not guard.accepts(viewer, token)


def test_without_keys_a_token_is_signed_with_the_process_secret() -> None:
    viewer = Viewer(name=None, key=None, can_write=True)
    token = FormGuard(b"a" * 32).issue(viewer)
    assert FormGuard(b"a" * 32).accepts(viewer, token)
    assert not FormGuard(b"b" * 32).accepts(viewer, token)


def test_with_keys_a_token_holds_on_every_replica_with_the_same_keys() -> None:
    viewer = Viewer(name="ops", key=WRITER, can_write=True)
    token = FormGuard(b"a" * 32).issue(viewer)
    assert FormGuard(b"b" * 32).accepts(viewer, token)
    assert not FormGuard().accepts(Viewer(name="ops", key=WRITER + "x", can_write=True), token)
