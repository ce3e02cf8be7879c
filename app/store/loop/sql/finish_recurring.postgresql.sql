-- Recurring schedules finished (`Dialect.finish_schedules` says what it means), in one
-- statement: of :schedule_ids, each pending one with nothing left pending (its bounds are
-- spent: until then it has a pending cadence occurrence; a failure callback still pending
-- keeps no schedule from being done, and a dead letter does not fail it) is read and
-- locked, then set completed, and given its event at its version (finishing is no change a
-- client makes: the version stays), by :actor. Event ids come as an array beside
-- :schedule_ids, one for each (those that do not finish leave theirs unused).
-- The EXISTS is a lookup per schedule through the index on `schedule_id` (OFFSET 0: never
-- pulled up into a join with every pending occurrence; finish_one_shots.postgresql.sql
-- says why).
WITH finishing AS (
    SELECT schedules.id AS id, schedules.version AS version, 'completed' AS status
    FROM schedules
    WHERE schedules.id = ANY(:schedule_ids)
      AND schedules.status = 'pending'
      AND NOT EXISTS (
          SELECT 1 FROM occurrences AS o
          WHERE o.schedule_id = schedules.id AND o.status = 'pending'
            AND o.origin <> 'callback'
          OFFSET 0
      )
    FOR UPDATE OF schedules
),
finished AS (
    UPDATE schedules SET status = finishing.status, updated_at = now()
    FROM finishing
    WHERE schedules.id = finishing.id
    RETURNING schedules.id, finishing.version, finishing.status
)
INSERT INTO schedule_events (id, schedule_id, kind, version, actor, at)
SELECT e.event_id, finished.id, finished.status, finished.version, :actor, now()
FROM finished
JOIN unnest(:schedule_ids, :event_ids) AS e(schedule_id, event_id) ON finished.id = e.schedule_id
