"""Tenant dispatch: `weight`, `paused`, the delivery quotas (`max_deliveries_per_second`,
`max_in_flight`) and `retention_seconds` on `tenants`; and every tenant's own flow key
(`tenant/`, an empty name), which the rows of no flow key of every tenant but `default` are
stored under, so that the claim sees a tenant's work by key and holds it back by the limits
of that key's row.

Revision ID: 0024_tenant_dispatch
Revises: 0023_tenant_quotas
Create Date: 2026-12-06 18:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0024_tenant_dispatch"
down_revision: str | None = "0023_tenant_quotas"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CHECKS = (
    ("weight", "weight >= 1 AND weight <= 100"),
    (
        "max_deliveries_per_second",
        "max_deliveries_per_second IS NULL OR max_deliveries_per_second >= 1",
    ),
    ("max_in_flight", "max_in_flight IS NULL OR max_in_flight >= 1"),
    ("retention_seconds", "retention_seconds IS NULL OR retention_seconds >= 0"),
)


def _own_key(tenant: str) -> str:
    if op.get_context().dialect.name in ("mysql", "mariadb"):
        return f"CONCAT({tenant}, '/')"
    return f"{tenant} || '/'"


def upgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.add_column(sa.Column("weight", sa.Integer(), nullable=False, server_default="1"))
        batch.add_column(
            sa.Column("paused", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch.add_column(sa.Column("max_deliveries_per_second", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("max_in_flight", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("retention_seconds", sa.BigInteger(), nullable=True))
        for name, condition in CHECKS:
            batch.create_check_constraint(op.f(f"tenants_{name}_check"), condition)
    # The rows of no flow key of every other tenant go under the tenant's own key.
    op.execute(
        f"UPDATE schedules SET flow_key = {_own_key('tenant')} "
        "WHERE flow_key IS NULL AND tenant <> 'default'"
    )
    op.execute(
        f"UPDATE occurrences SET flow_key = (SELECT {_own_key('s.tenant')} FROM schedules s "
        "WHERE s.id = occurrences.schedule_id) "
        "WHERE flow_key IS NULL AND status = 'pending' AND schedule_id IN "
        "(SELECT id FROM schedules WHERE tenant <> 'default')"
    )


def downgrade() -> None:
    own = "flow_key LIKE '%/'"
    op.execute(f"UPDATE occurrences SET flow_key = NULL WHERE {own}")
    op.execute(f"UPDATE schedules SET flow_key = NULL WHERE {own}")
    key = "`key`" if op.get_context().dialect.name in ("mysql", "mariadb") else '"key"'
    op.execute(f"DELETE FROM flow_keys WHERE {key} LIKE '%/'")
    with op.batch_alter_table("tenants") as batch:
        for name, _ in reversed(CHECKS):
            batch.drop_constraint(op.f(f"tenants_{name}_check"), type_="check")
        batch.drop_column("retention_seconds")
        batch.drop_column("max_in_flight")
        batch.drop_column("max_deliveries_per_second")
        batch.drop_column("paused")
        batch.drop_column("weight")
