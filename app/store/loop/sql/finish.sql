-- The schedules of :schedule_ids, read and locked by `finishing_one_shots` or
-- `finishing_recurring`, set to :b_status, the status that read gave them, at :now.
UPDATE schedules SET status = :b_status, updated_at = :now
WHERE schedules.id IN :schedule_ids
