-- The schedules of :failing that reach their `pause_after_failures` with this batch's dead
-- letters counted (named SQL `count_failures`): pending ones, which the loop then pauses
-- with reason "failures".
-- Locked, so that the pause that follows applies what this read found.
SELECT schedules.id, schedules.version, schedules."trigger", schedules.name,
       schedules.consecutive_failures, schedules.pause_after_failures
FROM schedules
WHERE schedules.id = ANY(:failing)
  AND schedules.status = 'pending'
  AND schedules.pause_after_failures IS NOT NULL
  AND schedules.consecutive_failures >= schedules.pause_after_failures
FOR UPDATE OF schedules
