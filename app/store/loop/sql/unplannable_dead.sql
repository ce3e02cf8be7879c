-- A claimed occurrence (:b_id, leased by :token) that could not be planned and has spent
-- its attempts: dead-lettered at :now with its error. A first claim (:b_reset) stays
-- unplanned, so a replay of the dead letter plans it again.
UPDATE occurrences SET
    status = 'dead_lettered',
    dead_lettered_at = :now,
    available_at = NULL,
    lease_token = NULL,
    last_error = :b_error,
    first_attempt_at = CASE WHEN :b_reset THEN NULL ELSE first_attempt_at END,
    updated_at = :now
WHERE occurrence_id = :b_id AND lease_token = :token
