-- One-shot schedules finished (`Dialect.finish_schedules` says what it means), in one
-- statement: of :schedule_ids, each with nothing left pending (a failure callback still
-- pending keeps no schedule from being done) is read and locked, then set to completed, or
-- failed if its firing was dead-lettered (a replay that later delivers it turns failed
-- into completed; one that stays failed is no change), and given its event at its version
-- (finishing is no change a client makes: the version stays), by :actor. Event ids come as
-- an array beside :schedule_ids, one for each (those that do not finish leave theirs
-- unused).
-- Each EXISTS is a lookup per schedule through the index on `schedule_id`: OFFSET 0 keeps
-- the planner from pulling it up into a join with every occurrence in that status (the
-- pending ones, or every dead letter ever kept). Planned from statistics taken before a
-- burst (a table of finished rows, then ten thousand due at once), that join read all of
-- them for each settle, and W1 fell from about 4,000 to 300 deliveries/s.
WITH finishing AS (
    SELECT schedules.id AS id, schedules.version AS version,
           CASE WHEN EXISTS (
               SELECT 1 FROM occurrences AS o
               WHERE o.schedule_id = schedules.id AND o.status = 'dead_lettered'
                 AND o.origin = 'schedule'
               OFFSET 0
           ) THEN 'failed' ELSE 'completed' END AS status
    FROM schedules
    WHERE schedules.id = ANY(:schedule_ids)
      AND schedules.status IN ('pending', 'failed')
      AND NOT EXISTS (
          SELECT 1 FROM occurrences AS o
          WHERE o.schedule_id = schedules.id AND o.status = 'pending'
            AND o.origin <> 'callback'
          OFFSET 0
      )
      AND (
          schedules.status = 'pending'
          OR NOT EXISTS (
              SELECT 1 FROM occurrences AS o
              WHERE o.schedule_id = schedules.id AND o.status = 'dead_lettered'
                AND o.origin = 'schedule'
              OFFSET 0
          )
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
