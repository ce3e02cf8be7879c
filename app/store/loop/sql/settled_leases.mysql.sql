-- The occurrences a settle still holds (`Dialect.record_attempts`), locked until it commits,
-- with the lease token each is held by (a cancel keeps the token of an attempt in flight,
-- so that attempt is still recorded).
SELECT occurrence_id, lease_token FROM occurrences
WHERE occurrence_id IN :ids AND status IN ('pending', 'cancelled')
FOR UPDATE
