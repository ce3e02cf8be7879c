-- The keyed claim's keys that may start something (:keys), each row with its limits,
-- bucket and back-off. The claim's transaction holds SQLite's only write lock: claims of
-- one key never interleave, with no row lock.
SELECT flow_keys."key" AS flow_key, flow_keys.rate, flow_keys.period_seconds, flow_keys.burst,
       flow_keys.parallelism, flow_keys.ordering, flow_keys.paused, flow_keys.tokens,
       flow_keys.refilled_at, flow_keys.backoff_until
FROM flow_keys
WHERE flow_keys."key" IN :keys
