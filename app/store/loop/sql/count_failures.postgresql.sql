-- A batch's dead letters counted, in one statement: each schedule of :failing adds to its
-- count of dead letters in a row those of :dead_ids that this transaction made (a late
-- settle whose lease was taken over dead-letters nothing, and counts nothing).
UPDATE schedules SET consecutive_failures = schedules.consecutive_failures + (
    SELECT count(*) FROM occurrences AS o
    WHERE o.schedule_id = schedules.id
      AND o.occurrence_id = ANY(:dead_ids)
      AND o.status = 'dead_lettered'
      AND o.dead_lettered_at = now()
)
WHERE schedules.id = ANY(:failing)
