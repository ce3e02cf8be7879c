-- Settled attempts into the attempt log (`Dialect.record_attempts` says what it means), in
-- one statement from arrays: one prepared statement and one cached plan whatever the rows,
-- guarded by each attempt's lease token, and locking the occurrences it matched until the
-- settle commits (a cancel keeps the token of an attempt in flight, so that attempt is
-- still recorded).
-- Each attempt's occurrence is a lookup by key of its own (a LATERAL subquery that locks,
-- which is never flattened into a join): planned from statistics that saw almost nothing
-- pending (a table of finished rows before a burst), a join was a scan of every occurrence,
-- or a comparison of every attempt with every row, for each settle (850 ms a statement).
INSERT INTO attempts (id, occurrence_id, attempt, started_at, duration_ms, outcome,
                      status_code, error, response_excerpt, replica, trace_id, endpoint_id,
                      fire_at, tenant, flow_key)
SELECT a.id, a.occurrence_id, a.attempt, a.started_at, a.duration_ms, a.outcome,
       a.status_code, a.error, a.response_excerpt, a.replica, a.trace_id, a.endpoint_id,
       a.fire_at, a.tenant, a.flow_key
FROM unnest(
    CAST(:ids AS uuid[]), CAST(:occurrence_ids AS uuid[]), CAST(:tokens AS uuid[]),
    CAST(:attempts AS integer[]), CAST(:started_ats AS timestamptz[]),
    CAST(:durations AS integer[]), CAST(:outcomes AS text[]),
    CAST(:status_codes AS integer[]), CAST(:errors AS text[]),
    CAST(:excerpts AS text[]), CAST(:replicas AS text[]), CAST(:trace_ids AS text[]),
    CAST(:endpoint_ids AS uuid[]), CAST(:fire_ats AS timestamptz[]),
    CAST(:tenants AS text[]), CAST(:flow_keys AS text[])
) AS a(id, occurrence_id, token, attempt, started_at, duration_ms, outcome,
       status_code, error, response_excerpt, replica, trace_id, endpoint_id,
       fire_at, tenant, flow_key)
CROSS JOIN LATERAL (
    SELECT 1 FROM occurrences AS o
    WHERE o.occurrence_id = a.occurrence_id AND o.lease_token = a.token
      AND o.status IN ('pending', 'cancelled')
    FOR UPDATE
) AS locked
