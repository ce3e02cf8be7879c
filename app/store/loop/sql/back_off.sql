-- A destination's back-off of a flow key (:b_key) until :b_until: it only ever moves
-- later, so an earlier Retry-After never shortens a longer one.
UPDATE flow_keys SET backoff_until = :b_until
WHERE flow_keys."key" = :b_key
  AND (flow_keys.backoff_until IS NULL OR flow_keys.backoff_until < :b_until)
