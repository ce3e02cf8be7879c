-- Claimed cadence occurrences that their misfire policy drops (:ids, leased by :token):
-- recorded as skipped at :now, their attempt not counted.
UPDATE occurrences SET
    status = 'skipped',
    skip_reason = 'misfire',
    skipped_count = 1,
    attempts = 0,
    available_at = NULL,
    lease_token = NULL,
    updated_at = :now
WHERE occurrence_id IN :ids AND lease_token = :token
