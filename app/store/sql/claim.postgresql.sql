-- Lease up to :limit due occurrences, oldest available first, skipping rows another
-- replica holds; one statement so that select, attempt count and lease are atomic.
-- Times come from the database clock.
WITH due AS (
    SELECT o.occurrence_id
    FROM occurrences AS o
    WHERE o.status = 'pending'
      AND o.available_at <= now()
      AND NOT EXISTS (
          SELECT 1 FROM schedules AS s WHERE s.id = o.schedule_id AND s.status = 'paused'
      )
    ORDER BY o.available_at
    LIMIT :limit
    FOR UPDATE OF o SKIP LOCKED
)
UPDATE occurrences AS o
SET attempts = o.attempts + 1,
    available_at = now() + make_interval(secs => :lease),
    lease_token = :token,
    lease_owner = :owner,
    updated_at = now()
FROM due
WHERE o.occurrence_id = due.occurrence_id
RETURNING o.occurrence_id, o.schedule_id, o.fire_at, o.attempts, o.origin, now() AS claimed_at
