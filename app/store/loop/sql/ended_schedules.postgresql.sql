-- Retention of schedules: up to :limit ended schedules that nothing has changed since
-- :cutoff (none of their occurrences pending or changed since), the oldest change first:
-- with :every, of every tenant but those of :kept (each kept by a retention of its
-- own); else of the tenants of :only.
-- The index predicate is written whole, so that the index of ended schedules is usable.
-- Rows another transaction holds are skipped. The occurrence check stays a lookup for each
-- schedule (OFFSET 0: never pulled up into a join with every pending or recent occurrence,
-- which statistics taken before a burst made a full scan).
SELECT schedules.id
FROM schedules
WHERE status IN ('completed', 'cancelled', 'failed')
  AND schedules.updated_at < :cutoff
  AND schedules.tenant NOT IN :kept
  AND (:every OR schedules.tenant IN :only)
  AND NOT EXISTS (
      SELECT 1 FROM occurrences
      WHERE occurrences.schedule_id = schedules.id
        AND (occurrences.status = 'pending' OR occurrences.updated_at >= :cutoff)
      OFFSET 0
  )
ORDER BY schedules.updated_at
LIMIT :limit
FOR UPDATE SKIP LOCKED
