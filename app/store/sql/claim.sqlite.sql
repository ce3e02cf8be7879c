-- Lease up to :limit due occurrences, oldest available first. SQLite has a single
-- writer (BEGIN IMMEDIATE), so the sub-select and the update cannot interleave with
-- another claim; :now is the database host's clock, which is this process's clock.
UPDATE occurrences
SET attempts = attempts + 1,
    available_at = :lease_until,
    lease_token = :token,
    lease_owner = :owner,
    updated_at = :now
WHERE occurrence_id IN (
    SELECT o.occurrence_id
    FROM occurrences AS o
    WHERE o.status = 'pending'
      AND o.available_at <= :now
      AND NOT EXISTS (
          SELECT 1 FROM schedules AS s WHERE s.id = o.schedule_id AND s.status = 'paused'
      )
    ORDER BY o.available_at
    LIMIT :limit
)
RETURNING occurrence_id, schedule_id, fire_at, attempts, origin, :now AS claimed_at
