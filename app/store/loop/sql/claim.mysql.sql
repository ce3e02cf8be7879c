-- The claim in steps (app/store/dialects/stepwise.py runs them in order, in one
-- transaction): lock the due rows, lease them, read them back with their schedules (there
-- is no UPDATE ... RETURNING).

-- Lock up to :limit due occurrences, oldest available first, skipping rows another
-- replica holds. The sub-select on schedules takes no locks (a locking read locks only
-- the rows of its own query block). `first_claim` marks an occurrence's first claim ever:
-- only then is it counted as a firing and its cadence planned. `lost_*` is the lease this
-- claim replaces, read before it is overwritten: a settle or a release clears the token, so
-- a token still set is an attempt nobody settled (its replica died or stalled).
-- A failure callback (origin `callback`) is no firing of its schedule (the fire count
-- leaves it out), and is not held by its pause: an auto-pause's own dead letter is reported.
-- `:skip` names destinations (`schedules.destination`) this replica has no room for: their
-- rows stay for a replica that has (a failure callback goes to another destination).
SELECT o.occurrence_id, o.schedule_id, o.origin, o.first_attempt_at IS NULL AS first_claim,
       o.lease_token AS lost_token, o.lease_owner AS lost_owner,
       o.leased_at AS lost_at, o.available_at AS lost_until,
       o.lease_token IS NOT NULL AND o.lease_ahead AS lost_ahead,
       greatest(o.available_at, o.fire_at) <= :now AS due_now
FROM occurrences AS o
WHERE o.status = 'pending' AND o.flow_key IS NULL
  AND o.available_at <= :ahead_until
  AND (o.lease_token IS NULL OR o.available_at <= :now)
  AND NOT EXISTS (
      SELECT 1 FROM schedules AS s
      WHERE s.id = o.schedule_id AND o.origin <> 'callback'
        AND (s.status = 'paused' OR s.destination IN :skip)
  )
ORDER BY o.available_at
LIMIT :limit
FOR UPDATE SKIP LOCKED;

-- Lease them: the attempt, the lease's end and token, the first attempt's instant. A lease
-- lost while it still waited for its instant (`lease_ahead`) never started: this claim's
-- attempt is that same attempt. `:unstarted`: the claim found more rows due now (`due_now`)
-- than may start at once, and each waits unstarted (as one claimed ahead) for its start
-- mark. `leased_at`: when the attempt may start (now, or the due instant of one claimed
-- ahead). MySQL assigns left to right, each assignment seeing the
-- ones before it: what reads `lease_token`, `lease_ahead` and `available_at` comes first.
UPDATE occurrences
SET attempts = attempts + CASE WHEN lease_token IS NOT NULL AND lease_ahead THEN 0 ELSE 1 END,
    leased_at = greatest(available_at, fire_at, :now),
    lease_ahead = greatest(available_at, fire_at) > :now OR :unstarted,
    available_at = :lease_until,
    lease_until = :lease_until,
    lease_token = :token,
    lease_owner = :owner,
    first_attempt_at = coalesce(first_attempt_at, :now),
    updated_at = :now
WHERE occurrence_id IN :ids;

-- And read each back with its schedule's definition, misfire rules and tick count. A first claim is one that set the
-- instant just now (a re-claim comes a lease later, so an earlier first attempt never
-- equals :now). `trigger` is a reserved word here.
SELECT o.occurrence_id, o.schedule_id, o.fire_at, o.attempts, o.origin, o.flow_key,
       o.parent_id,
       o.lease_ahead,
       o.first_attempt_at = :now AS first_claim,
       CAST(:now AS DATETIME(6)) AS claimed_at,
       s.event_type, s.max_attempts, s.jitter_seconds,
       s.payload AS body, s.target AS target, s.`trigger` AS `trigger`,
       s.retry AS retry, s.on_failure AS on_failure, o.body AS callback_body,
       s.traceparent, s.tenant,
       s.misfire_policy, s.misfire_grace_seconds, s.max_catchup, s.max_occurrences,
       s.tick_count
FROM occurrences AS o
JOIN schedules AS s ON s.id = o.schedule_id
WHERE o.occurrence_id IN :ids
