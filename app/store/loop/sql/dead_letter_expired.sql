-- Claimed occurrences (:ids, leased by :token) whose lease ran out on their last attempt:
-- dead-lettered at :now with :last_error, the attempt the claim counted taken back (the
-- lost one was the last).
UPDATE occurrences SET
    status = 'dead_lettered',
    attempts = attempts - 1,
    dead_lettered_at = :now,
    available_at = NULL,
    lease_token = NULL,
    last_error = :last_error,
    updated_at = :now
WHERE occurrence_id IN :ids AND lease_token = :token
