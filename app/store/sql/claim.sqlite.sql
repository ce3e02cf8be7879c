-- Lease up to :limit due occurrences, oldest available first, and return each with its
-- schedule's definition. SQLite has a single writer (BEGIN IMMEDIATE), so the select and
-- the update cannot interleave with another claim; the time parameter is the database
-- host's clock, which is this process's clock. SQLite has no data-modifying CTE, so the
-- schedules' fire counters are bumped by _count_first_fires in the same transaction.

-- The due rows, with the lease each claim replaces (`lost_*`), read before the update
-- overwrites it (RETURNING sees only new values): a settle or a release clears the token,
-- so a token still set is an attempt nobody settled (its replica died or stalled).
SELECT o.occurrence_id, o.lease_token AS lost_token, o.lease_owner AS lost_owner,
       o.leased_at AS lost_at, o.available_at AS lost_until,
       o.lease_token IS NOT NULL AND o.lease_ahead AS lost_ahead
FROM occurrences AS o
WHERE o.status = 'pending'
  AND o.available_at <= :ahead_until
  AND (o.lease_token IS NULL OR o.available_at <= :now)
  AND NOT EXISTS (
      SELECT 1 FROM schedules AS s WHERE s.id = o.schedule_id AND s.status = 'paused'
  )
ORDER BY o.available_at
LIMIT :limit;

-- Lease them and read each back with its schedule's definition.
-- A lease lost while it still waited for its instant (`lease_ahead`) never started: this
-- claim's attempt is that same attempt. `leased_at`: when the attempt may start (now, or
-- the due instant of one claimed ahead).
UPDATE occurrences
SET attempts = attempts + CASE WHEN lease_token IS NOT NULL AND lease_ahead THEN 0 ELSE 1 END,
    leased_at = max(available_at, fire_at, :now),
    lease_ahead = max(available_at, fire_at) > :now,
    available_at = :lease_until,
    lease_token = :token,
    lease_owner = :owner,
    first_attempt_at = coalesce(first_attempt_at, :now),
    updated_at = :now
WHERE occurrence_id IN :ids
RETURNING occurrence_id, schedule_id, fire_at, attempts, origin,
    -- RETURNING sees the new row: a first claim is one that set the instant just now (a
    -- re-claim comes a lease later, so an earlier first attempt never equals :now).
    first_attempt_at = :now AS first_claim,
    :now AS claimed_at,
    (SELECT s.event_type FROM schedules AS s WHERE s.id = schedule_id) AS event_type,
    (SELECT s.max_attempts FROM schedules AS s WHERE s.id = schedule_id) AS max_attempts,
    (SELECT s.jitter_seconds FROM schedules AS s WHERE s.id = schedule_id) AS jitter_seconds,
    -- The payload's text: stored as bytes (a row from before that, a bare number, as one).
    (SELECT CAST(s.payload AS TEXT) FROM schedules AS s WHERE s.id = schedule_id) AS body,
    (SELECT s.target FROM schedules AS s WHERE s.id = schedule_id) AS target,
    (SELECT s.trigger FROM schedules AS s WHERE s.id = schedule_id) AS trigger
