-- A claimed occurrence (:b_id, leased by :token) that could not be planned: due again at
-- :b_at, with its error. A first claim (:b_reset) stays unplanned, so the retry plans it
-- again.
UPDATE occurrences SET
    available_at = :b_at,
    lease_token = NULL,
    last_error = :b_error,
    first_attempt_at = CASE WHEN :b_reset THEN NULL ELSE first_attempt_at END,
    updated_at = :now
WHERE occurrence_id = :b_id AND lease_token = :token
