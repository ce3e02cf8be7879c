"""The history tables kept in day partitions on PostgreSQL: the attempt log and the
schedules' events.

Each is partitioned by range of its instant (`attempts.started_at`, `schedule_events.at`),
a partition a UTC day, so retention drops a day of history with one `DROP TABLE` and leaves
nothing for vacuum, where deleting it row by row cost a delete, index deletes and vacuum for
each (`app.store.records.history` keeps them). SQLite and MySQL keep plain tables whose rows
go with their occurrence or schedule (foreign keys, on delete cascade), as before.

Invariants (PostgreSQL):
- A partition's key includes its instant: the primary key is `(id, <instant>)`. Ids are
  UUIDv7, made once, so it is as unique as the id alone.
- No foreign key ties a history row to its occurrence or schedule: deleting one leaves its
  history in place until its day's partition is dropped, unread, since every read goes
  through the occurrence or schedule (or, for an endpoint's attempts, keeps only those whose
  occurrence is still there).
- Every row has a partition: a day's own, the one a migration made of the table before
  (`<table>_upto_<day>`, every instant before that day), or the default one
  (`<table>_kept`). The default holds what was kept when its day was dropped (the history of
  an occurrence or schedule that outlived it) and what was written while no partition of its
  day existed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

import sqlalchemy as sa

from app.store.schema.tables import attempts, occurrences, schedule_events, schedules


@dataclass(frozen=True, slots=True)
class History:
    """One partitioned history table and what its rows belong to."""

    table: sa.Table
    # The instant it is partitioned by.
    instant: str
    # The rows' owner: `table.<owner_key>` names `owner.<owner_column>`.
    owner: sa.Table
    owner_key: str
    owner_column: str

    @property
    def name(self) -> str:
        return str(self.table.name)

    @property
    def kept(self) -> str:
        """The default partition."""
        return f"{self.name}_kept"

    def day(self, day: date) -> str:
        """The partition of the UTC day `day`, named by the day it ends at."""
        return f"{self.name}_p{day + timedelta(days=1):%Y%m%d}"

    def ends(self, partition: str) -> datetime | None:
        """The instant a partition of this table ends at, read from its name (None: not one
        of the day partitions or the migration's, which the service leaves alone)."""
        found = re.fullmatch(rf"{re.escape(self.name)}_(p|upto_)(\d{{8}})", partition)
        if found is None:
            return None
        return datetime.strptime(found.group(2), "%Y%m%d").replace(tzinfo=UTC)

    def is_day(self, partition: str) -> bool:
        """Whether `partition` is one day's (not the migration's, which reaches back)."""
        return partition.startswith(f"{self.name}_p")


ATTEMPTS = History(attempts, "started_at", occurrences, "occurrence_id", "occurrence_id")
EVENTS = History(schedule_events, "at", schedules, "schedule_id", "id")
HISTORY = (ATTEMPTS, EVENTS)
PARTITIONED = {h.name: h for h in HISTORY}


def midnight(day: date) -> datetime:
    """The instant a UTC day starts at."""
    return datetime.combine(day, time(), tzinfo=UTC)


def partitioned_table(history: History) -> sa.Table:
    """`history`'s table as PostgreSQL holds it: partitioned by range of its instant, the
    instant in its primary key, no foreign key (for the DDL; the migration builds the same)."""
    copy = history.table.to_metadata(sa.MetaData())
    for constraint in list(copy.constraints):
        if isinstance(constraint, sa.ForeignKeyConstraint):
            copy.constraints.discard(constraint)
    for column in copy.columns:
        column.foreign_keys.clear()
    copy.c[history.instant].primary_key = True
    copy.append_constraint(
        sa.PrimaryKeyConstraint("id", history.instant, name=f"{history.name}_pkey")
    )
    copy.dialect_options["postgresql"]["partition_by"] = f"RANGE ({history.instant})"
    return copy
