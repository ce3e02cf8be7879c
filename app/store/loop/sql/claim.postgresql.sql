-- Lease up to :limit due occurrences, oldest available first, skipping rows another
-- replica holds, and return each with its schedule's definition. One statement: the
-- select, the attempt count, the lease and the schedules' fire counters are atomic,
-- and the claim costs a single round trip. Times come from the database clock.
-- `first_claim` marks an occurrence's first claim ever (a replay resets `attempts`, not
-- `first_attempt_at`): only then is it counted as a firing and its cadence planned.
-- `lost_*` is the lease this claim replaces, read before it is overwritten: a settle or a
-- release clears the token, so a token still set is an attempt nobody settled (its replica
-- died or stalled), with its owner, its claim instant and its lease's end.
-- A failure callback (origin `callback`) is no firing of its schedule, is not held by its
-- pause (an auto-pause's own dead letter is reported), and delivers its `body` to the
-- schedule's `on_failure` target.
-- `:skip` names destinations (`schedules.destination`) this replica has no room for: their
-- rows stay for a replica that has (a failure callback goes to another destination).
-- A schedule's `last_fired_at` is the instant its attempt is sent (`leased_at`), not the
-- claim's: a claim ahead would otherwise show it fired before its tick.
-- Each row also carries its schedule's misfire rules and tick count, which the planner of
-- a cadence tick needs (no read of its own).
-- `:ahead` (seconds, usually 0) also leases occurrences due that soon, which the loop holds
-- until their instant (`lost_until` is then that instant); never one still leased, whose
-- holder may yet settle it until its lease ends. `leased_at` is when the attempt may start
-- (now, or the due instant of one claimed ahead), `lease_ahead` whether it waits for it: a
-- lease lost while still waiting (`lost_ahead`) never started, so this claim's attempt is
-- that same attempt, not another one.
-- `:start` is how many attempts may start at once: a claim that finds more rows due now
-- than that starts none of them, and each waits unstarted (`lease_ahead`, as one claimed
-- ahead) until the loop marks it started (start_mark.postgresql.sql); a lease lost before that
-- mark costs no attempt.
WITH due AS (
    SELECT o.occurrence_id, o.first_attempt_at IS NULL AS first_claim,
           o.lease_token AS lost_token, o.lease_owner AS lost_owner,
           o.leased_at AS lost_at, o.available_at AS lost_until,
           o.lease_token IS NOT NULL AND o.lease_ahead AS lost_ahead,
           greatest(o.available_at, o.fire_at) AS due_at
    FROM occurrences AS o
    WHERE o.status = 'pending' AND o.flow_key IS NULL
      AND o.available_at <= now() + make_interval(secs => :ahead)
      AND (o.lease_token IS NULL OR o.available_at <= now())
      AND NOT EXISTS (
          SELECT 1 FROM schedules AS s
          WHERE s.id = o.schedule_id AND o.origin <> 'callback'
            AND (s.status = 'paused' OR s.destination = ANY(:skip))
      )
    ORDER BY o.available_at
    LIMIT :limit
    FOR UPDATE OF o SKIP LOCKED
),
claimed AS (
    UPDATE occurrences AS o
    SET attempts = o.attempts + CASE WHEN due.lost_ahead THEN 0 ELSE 1 END,
        available_at = now() + make_interval(secs => :lease),
        lease_until = now() + make_interval(secs => :lease),
        leased_at = greatest(due.due_at, now()),
        lease_ahead = due.due_at > now()
            OR (SELECT count(*) FROM due WHERE due.due_at <= now()) > :start,
        lease_token = :token,
        lease_owner = :owner,
        first_attempt_at = coalesce(o.first_attempt_at, now()),
        updated_at = now()
    FROM due
    WHERE o.occurrence_id = due.occurrence_id
    RETURNING o.occurrence_id, o.schedule_id, o.fire_at, o.attempts, o.origin, o.flow_key,
              o.parent_id,
              o.body, o.leased_at, o.lease_ahead, due.first_claim,
              due.lost_token, due.lost_owner, due.lost_at, due.lost_until, due.lost_ahead
),
first_fires AS (
    UPDATE schedules AS s
    SET fire_count = s.fire_count + f.fired, last_fired_at = f.sent_at
    FROM (
        SELECT schedule_id, count(*) AS fired, max(leased_at) AS sent_at FROM claimed
        WHERE first_claim AND origin NOT IN ('callback', 'fanout')
        GROUP BY schedule_id
    ) AS f
    WHERE s.id = f.schedule_id
)
SELECT c.occurrence_id, c.schedule_id, c.fire_at, c.attempts, c.origin, c.flow_key,
       c.parent_id,
       c.lease_ahead, c.first_claim,
       c.lost_token, c.lost_owner, c.lost_at, c.lost_until, c.lost_ahead,
       now() AS claimed_at,
       s.event_type, s.max_attempts, s.jitter_seconds,
       s.payload::text AS body, s.target::text AS target, s.trigger::text AS trigger,
       s.retry::text AS retry, s.on_failure::text AS on_failure, c.body AS callback_body,
       s.traceparent, s.tenant,
       s.misfire_policy, s.misfire_grace_seconds, s.max_catchup, s.max_occurrences,
       s.tick_count
FROM claimed AS c
JOIN schedules AS s ON s.id = c.schedule_id
