-- The flow keys with occurrences due (or due within :ahead seconds), and those whose earliest
-- is more than :far seconds off (for the claim to put to sleep), the earliest first, each with its stored limits,
-- bucket and back-off as last committed (no lock: the keyed claim locks only the keys it
-- may start something of, and reads them again under that lock).
-- A loose index scan: one probe of `ix_occurrences_flow` per key that has pending rows,
-- however many rows wait on it, then the key's earliest `available_at` (its first entry).
-- A paused schedule's rows have no `available_at`, so a key with only those is not due;
-- rows a paused or backing-off key holds (`shelved`) are not in the index at all.
-- A key whose circuit is open (an endpoint's, `flow_keys.circuit`) reads as parallelism 1:
-- once its cooldown (its back-off) is over, one attempt at a time probes the endpoint.
WITH RECURSIVE keyed(flow_key) AS (
    SELECT min(o.flow_key) FROM occurrences AS o
    WHERE o.status = 'pending' AND o.flow_key IS NOT NULL AND NOT o.shelved
    UNION ALL
    SELECT (
        SELECT min(o.flow_key) FROM occurrences AS o
        WHERE o.status = 'pending' AND o.flow_key IS NOT NULL AND NOT o.shelved
          AND o.flow_key > k.flow_key
    )
    FROM keyed AS k
    WHERE k.flow_key IS NOT NULL
),
due AS (
    SELECT k.flow_key, (
        SELECT min(o.available_at) FROM occurrences AS o
        WHERE o.status = 'pending' AND o.flow_key IS NOT NULL AND NOT o.shelved
          AND o.flow_key = k.flow_key
    ) AS first_at
    FROM keyed AS k
    WHERE k.flow_key IS NOT NULL
)
SELECT d.flow_key, d.first_at, now() AS now,
       f.rate, f.period_seconds, f.burst,
       CASE WHEN f.circuit = 'open' THEN 1 ELSE f.parallelism END AS parallelism, f.ordering, f.paused,
       f.tokens, f.refilled_at, f.backoff_until
FROM due AS d
LEFT JOIN flow_keys AS f ON f.key = d.flow_key
WHERE d.first_at <= now() + make_interval(secs => :ahead)
   OR d.first_at > now() + make_interval(secs => :far)
ORDER BY d.first_at
