"""History in day partitions (PostgreSQL): `attempts` by `started_at` and `schedule_events`
by `at` become range-partitioned tables, so retention drops a day of either at once.

Every row stays. The table as it was becomes one partition, `<table>_upto_<day>`, holding
every instant before the UTC day after the migration (or after its newest row), and is
dropped by retention like any day once that day is old enough, keeping the rows whose
occurrence or schedule is still there. A default partition, `<table>_kept`, takes what
no partition covers; the service makes the day partitions ahead (app.store.records.history).
The primary key becomes `(id, <instant>)`, which a partitioned table needs, and the foreign
keys go: history is deleted by the day, not with its occurrence or schedule.

The upgrade builds the new primary key's index over the rows there are, so it takes time in
proportion to the history held. SQLite and MySQL are left as they are.

Revision ID: 0031_history_partitions
Revises: 0030_activity_minutes
Create Date: 2026-12-12 10:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0031_history_partitions"
down_revision: str | None = "0030_activity_minutes"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# table, instant, owner table, owner key column, owner column, indexes (name, definition)
_HISTORY = (
    (
        "attempts",
        "started_at",
        "occurrences",
        "occurrence_id",
        "occurrence_id",
        (
            ("ix_attempts_occurrence_id_started_at", "(occurrence_id, started_at)"),
            ("ix_attempts_endpoint", "(endpoint_id, started_at) WHERE endpoint_id IS NOT NULL"),
        ),
    ),
    (
        "schedule_events",
        "at",
        "schedules",
        "schedule_id",
        "id",
        (("ix_schedule_events_schedule_id_id", "(schedule_id, id)"),),
    ),
)


def _partition(table: str, instant: str, owner_key: str, indexes: Sequence[tuple[str, str]]) -> str:
    # One block per table, so the day is read from the rows on the server (and `migrate
    # --sql` renders it too).
    renames = "\n".join(
        f"  EXECUTE format('ALTER INDEX {name} RENAME TO %I', legacy || '_{n}');"
        for n, (name, _) in enumerate(indexes)
    )
    creates = "\n".join(f"  CREATE INDEX {name} ON {table} {spec};" for name, spec in indexes)
    return f"""
DO $$
DECLARE
  upper date := greatest(
    (now() AT TIME ZONE 'UTC')::date + 1,
    (SELECT (max({instant}) AT TIME ZONE 'UTC')::date + 1 FROM {table}));
  legacy text := '{table}_upto_' || to_char(upper, 'YYYYMMDD');
BEGIN
  EXECUTE format('ALTER TABLE {table} RENAME TO %I', legacy);
  EXECUTE format('ALTER TABLE %I DROP CONSTRAINT {table}_{owner_key}_fkey', legacy);
  EXECUTE format('ALTER TABLE %I DROP CONSTRAINT {table}_pkey', legacy);
{renames}
  EXECUTE format('CREATE TABLE {table} (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS)'
                 ' PARTITION BY RANGE ({instant})', legacy);
  ALTER TABLE {table} ADD CONSTRAINT {table}_pkey PRIMARY KEY (id, {instant});
{creates}
  CREATE TABLE {table}_kept PARTITION OF {table} DEFAULT;
  EXECUTE format('ALTER TABLE {table} ATTACH PARTITION %I FOR VALUES FROM (MINVALUE) TO (%L)',
                 legacy, upper::timestamp AT TIME ZONE 'UTC');
END $$"""


def upgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    for table, instant, _, owner_key, _, indexes in _HISTORY:
        op.execute(_partition(table, instant, owner_key, indexes))


def downgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    # Back to one table with its foreign key: the rows whose occurrence or schedule is
    # gone (which retention was yet to drop with their day) go now.
    for table, _, owner, owner_key, owner_column, indexes in _HISTORY:
        op.execute(
            f"CREATE TABLE {table}_flat (LIKE {table} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
        )
        op.execute(
            f"INSERT INTO {table}_flat SELECT h.* FROM {table} AS h WHERE EXISTS "
            f"(SELECT 1 FROM {owner} AS o WHERE o.{owner_column} = h.{owner_key})"
        )
        op.execute(f"DROP TABLE {table}")
        op.execute(f"ALTER TABLE {table}_flat RENAME TO {table}")
        op.execute(f"ALTER TABLE {table} ADD CONSTRAINT {table}_pkey PRIMARY KEY (id)")
        op.execute(
            f"ALTER TABLE {table} ADD CONSTRAINT {table}_{owner_key}_fkey FOREIGN KEY "
            f"({owner_key}) REFERENCES {owner} ({owner_column}) ON DELETE CASCADE"
        )
        for name, spec in indexes:
            op.execute(f"CREATE INDEX {name} ON {table} {spec}")
