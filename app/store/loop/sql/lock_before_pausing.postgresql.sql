-- First in a settle with dead letters: the pending occurrences of their schedules
-- (:failing) that may pause themselves, locked in the order a manual pause locks them
-- (schedule by schedule, in fire order), before the settle locks any schedule.
-- A pause then never holds some of them while waiting for the settle, which would wait for
-- the rest: the two cannot deadlock.
SELECT occurrences.occurrence_id
FROM occurrences
WHERE occurrences.schedule_id = ANY(:failing)
  AND occurrences.status = 'pending'
  AND EXISTS (
      SELECT 1 FROM schedules
      WHERE schedules.id = occurrences.schedule_id
        AND schedules.pause_after_failures IS NOT NULL
        AND schedules.status = 'pending'
  )
ORDER BY occurrences.schedule_id, occurrences.fire_at, occurrences.occurrence_id
FOR UPDATE OF occurrences
