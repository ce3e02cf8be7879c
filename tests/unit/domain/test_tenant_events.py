"""What a tenant's PUT records: `created` or `updated` with the fields whose value changed,
then `paused` or `resumed` when it flips the pause."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from app.domain.tenant_events import PUT_FIELDS, TenantChange, TenantEventKind, put_changes
from app.domain.tenants import Quotas, Tenant, TenantSpec

T0 = datetime(2026, 12, 7, 10, 0, tzinfo=UTC)
STORED = Tenant(id="acme", display_name="Acme", version=4, created_at=T0, updated_at=T0)
SAME = TenantSpec(display_name="Acme")

CREATED = TenantChange(TenantEventKind.CREATED)
PAUSED = TenantChange(TenantEventKind.PAUSED)
RESUMED = TenantChange(TenantEventKind.RESUMED)


def updated(*fields: str) -> TenantChange:
    return TenantChange(TenantEventKind.UPDATED, list(fields))


def test_a_new_tenant_is_created_and_one_made_paused_is_paused_from_the_start() -> None:
    assert put_changes(None, SAME) == [CREATED]
    assert put_changes(None, replace(SAME, paused=True)) == [CREATED, PAUSED]


@pytest.mark.parametrize(
    ("spec", "changes"),
    [
        (SAME, [updated()]),
        (replace(SAME, display_name=None), [updated("display_name")]),
        (replace(SAME, retention_seconds=0), [updated("retention_seconds")]),
        (replace(SAME, quotas=Quotas(max_in_flight=3), weight=2), [updated("weight", "quotas")]),
        (replace(SAME, paused=True), [updated("paused"), PAUSED]),
    ],
    ids=["nothing", "display name cleared", "retention", "weight and quotas", "pause"],
)
def test_a_replaced_tenant_is_updated_with_what_changed_in_the_puts_order(
    spec: TenantSpec, changes: list[TenantChange]
) -> None:
    assert put_changes(STORED, spec) == changes


def test_a_resume_is_recorded_after_its_update() -> None:
    paused = replace(STORED, paused=True, weight=5)

    assert put_changes(paused, SAME) == [updated("weight", "paused"), RESUMED]


def test_the_fields_named_are_those_a_tenant_and_a_put_both_have() -> None:
    assert all(hasattr(STORED, name) and hasattr(SAME, name) for name in PUT_FIELDS)
