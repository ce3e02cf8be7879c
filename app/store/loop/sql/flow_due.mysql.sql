-- The flow keys with occurrences due by :until, and those whose earliest is after :far_at
-- (for the claim to put to sleep), the earliest first, each with its stored limits,
-- bucket and back-off as last committed (a plain read takes no locks). The GROUP BY is a
-- loose index scan of the claim index `(status, flow_key, available_at)`: one probe per key
-- that has pending rows, however many rows wait on it. A paused schedule's rows have no
-- `available_at`, so a key with only those is not due; nor is one whose rows its key holds
-- (`shelved`, paused or backing off).
-- A key whose circuit is open (an endpoint's, `flow_keys.circuit`) reads as parallelism 1:
-- once its cooldown (its back-off) is over, one attempt at a time probes the endpoint.
SELECT d.flow_key, d.first_at, CAST(:now AS DATETIME(6)) AS now,
       f.rate, f.period_seconds, f.burst,
       CASE WHEN f.circuit = 'open' THEN 1 ELSE f.parallelism END AS parallelism, f.ordering, f.paused,
       f.tokens, f.refilled_at, f.backoff_until
FROM (
    SELECT o.flow_key, MIN(o.available_at) AS first_at
    FROM occurrences AS o
    WHERE o.status = 'pending' AND o.flow_key IS NOT NULL AND NOT o.shelved
    GROUP BY o.flow_key
) AS d
LEFT JOIN flow_keys AS f ON f.`key` = d.flow_key
WHERE d.first_at <= :until OR d.first_at > :far_at
ORDER BY d.first_at
