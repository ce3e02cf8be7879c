-- The recurring schedules a finish changes (`Dialect.finish_schedules` says what it
-- means): of :schedule_ids, each pending one with nothing left pending (until its bounds
-- are spent it has a pending cadence occurrence; a failure callback still pending keeps no
-- schedule from being done, and a dead letter does not fail it), completed.
-- No row lock: the finish's transaction holds SQLite's only write lock, and then changes
-- them by key (named SQL `finish`).
SELECT schedules.id, schedules.version, 'completed' AS status
FROM schedules
WHERE schedules.id IN :schedule_ids
  AND schedules.status = 'pending'
  AND NOT EXISTS (
      SELECT 1 FROM occurrences AS o
      WHERE o.schedule_id = schedules.id AND o.status = 'pending' AND o.origin <> 'callback'
  )
