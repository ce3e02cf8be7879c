-- Retention of schedules: up to :limit ended schedules that nothing has changed since
-- :cutoff (none of their occurrences pending or changed since), the oldest change first:
-- with :every, of every tenant but those of :kept (each kept by a retention of its
-- own); else of the tenants of :only.
-- The index predicate is written whole, so that the index of ended schedules is usable.
-- Rows another transaction holds are skipped.
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
  )
ORDER BY schedules.updated_at
LIMIT :limit
FOR UPDATE SKIP LOCKED
