-- The keys shelving rows that may start again (resumed, or their back-off over by :now),
-- locked: a key another claim holds is left to it (`ix_flow_keys_unshelving`: a paused key
-- is none of them, however many there are).
SELECT flow_keys.`key` AS flow_key
FROM flow_keys
WHERE flow_keys.shelving AND NOT flow_keys.paused
  AND (flow_keys.backoff_until IS NULL OR flow_keys.backoff_until <= :now)
FOR UPDATE SKIP LOCKED
