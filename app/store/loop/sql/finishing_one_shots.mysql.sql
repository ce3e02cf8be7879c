-- The one-shot schedules a finish changes (`Dialect.finish_schedules` says what it means):
-- of :schedule_ids, each with nothing left pending (a failure callback still pending keeps
-- no schedule from being done), with the status it takes: completed, or failed if its
-- firing was dead-lettered (a replay that later delivers it turns failed into completed;
-- one that stays failed is no change).
-- Locked: the finish then changes them by key (named SQL `finish`), applying what this read
-- decided rather than a second look at the guard, which under READ COMMITTED could see
-- another transaction's commit and disagree with the events.
SELECT schedules.id, schedules.version,
       CASE WHEN EXISTS (
           SELECT 1 FROM occurrences AS o
           WHERE o.schedule_id = schedules.id AND o.status = 'dead_lettered'
             AND o.origin = 'schedule'
       ) THEN 'failed' ELSE 'completed' END AS status
FROM schedules
WHERE schedules.id IN :schedule_ids
  AND schedules.status IN ('pending', 'failed')
  AND NOT EXISTS (
      SELECT 1 FROM occurrences AS o
      WHERE o.schedule_id = schedules.id AND o.status = 'pending' AND o.origin <> 'callback'
  )
  AND (
      schedules.status = 'pending'
      OR NOT EXISTS (
          SELECT 1 FROM occurrences AS o
          WHERE o.schedule_id = schedules.id AND o.status = 'dead_lettered'
            AND o.origin = 'schedule'
      )
  )
FOR UPDATE
