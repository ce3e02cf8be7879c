-- After a settle's deliveries (named SQL `delivered`): each schedule of :touched that
-- delivered one of :delivered_ids in this transaction (at :now) and counts dead letters in
-- a row starts again from 0 (only those counting: most schedules never fail, and are not
-- written). A failure callback delivered is no delivery of its schedule's.
UPDATE schedules SET consecutive_failures = 0
WHERE schedules.id IN :touched
  AND schedules.consecutive_failures > 0
  AND EXISTS (
      SELECT 1 FROM occurrences AS o
      WHERE o.schedule_id = schedules.id
        AND o.occurrence_id IN :delivered_ids
        AND o.status = 'delivered'
        AND o.delivered_at = :now
        AND o.origin <> 'callback'
  )
