-- A settle's deliveries (`Dialect.mark_delivered` says what they mean) held by one lease:
-- the occurrences of :ids that lease :token still holds, delivered at :now. The status is
-- tested as an expression no partial index is defined on: the rows are found by key.
UPDATE occurrences SET
    status = 'delivered',
    delivered_at = :now,
    available_at = NULL,
    updated_at = :now,
    lease_token = NULL,
    last_error = NULL
WHERE occurrence_id IN :ids AND lease_token = :token AND coalesce(status, '') = 'pending'
