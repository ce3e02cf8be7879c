-- The occurrences a settle still holds (`Dialect.record_attempts`), with the lease token
-- each is held by (a cancel keeps the token of an attempt in flight, so that attempt is
-- still recorded). The settle's transaction holds SQLite's only write lock: no row lock.
SELECT occurrence_id, lease_token FROM occurrences
WHERE occurrence_id IN :ids AND status IN ('pending', 'cancelled')
