-- A settled attempt that failed for the last time: the occurrence (:b_id) that its lease
-- (:b_token) still holds is dead-lettered now, with its error.
UPDATE occurrences SET
    status = 'dead_lettered',
    dead_lettered_at = now(),
    available_at = NULL,
    last_error = :b_error,
    lease_token = NULL,
    updated_at = now()
WHERE occurrence_id = :b_id AND lease_token = :b_token AND status = 'pending'
