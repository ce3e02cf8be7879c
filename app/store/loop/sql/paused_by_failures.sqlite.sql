-- The schedules of :failing that reach their `pause_after_failures` with this batch's dead
-- letters counted (named SQL `count_failures`): pending ones, which the loop then pauses
-- with reason "failures".
-- The settle's transaction holds SQLite's only write lock: no row lock.
SELECT schedules.id, schedules.version, schedules."trigger", schedules.name,
       schedules.consecutive_failures, schedules.pause_after_failures
FROM schedules
WHERE schedules.id IN :failing
  AND schedules.status = 'pending'
  AND schedules.pause_after_failures IS NOT NULL
  AND schedules.consecutive_failures >= schedules.pause_after_failures
