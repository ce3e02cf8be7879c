-- First in a settle with dead letters: the pending occurrences of their schedules
-- (:failing) that may pause themselves, locked in the order a manual pause locks them
-- (schedule by schedule, in fire order), before the settle locks any schedule.
-- SQLite has one writer: a settle holds its only write lock, and this read locks nothing.
SELECT occurrences.occurrence_id
FROM occurrences
WHERE occurrences.schedule_id IN :failing
  AND occurrences.status = 'pending'
  AND EXISTS (
      SELECT 1 FROM schedules
      WHERE schedules.id = occurrences.schedule_id
        AND schedules.pause_after_failures IS NOT NULL
        AND schedules.status = 'pending'
  )
ORDER BY occurrences.schedule_id, occurrences.fire_at, occurrences.occurrence_id
