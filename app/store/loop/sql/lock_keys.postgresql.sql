-- The keyed claim's keys that may start something (:keys), each row with its limits,
-- bucket and back-off, locked: a key another claim holds is skipped, never waited for, so
-- claims of one key never interleave.
-- A key whose circuit is open (an endpoint's, `flow_keys.circuit`) reads as parallelism 1:
-- once its cooldown (its back-off) is over, one attempt at a time probes the endpoint.
SELECT flow_keys.key AS flow_key, flow_keys.rate, flow_keys.period_seconds, flow_keys.burst,
       CASE WHEN flow_keys.circuit = 'open' THEN 1 ELSE flow_keys.parallelism END AS parallelism,
       flow_keys.ordering, flow_keys.paused, flow_keys.tokens,
       flow_keys.refilled_at, flow_keys.backoff_until
FROM flow_keys
WHERE flow_keys.key IN :keys
FOR UPDATE SKIP LOCKED
