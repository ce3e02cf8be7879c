-- The flow keys with occurrences due (or due within :ahead seconds), found from the due
-- rows themselves: up to :window of them in due order (`ix_occurrences_flow_open`, which
-- leaves out what keys shelved), each key with its earliest instant, its stored limits,
-- bucket and back-off as last committed (no lock), and how many rows the window read
-- (`scanned`). Keys with only future rows cost nothing here, however many there are. When
-- the window is full there may be keys beyond it, and the caller asks the loose scan of
-- every key (named SQL `flow_due`) instead.
-- A key whose circuit is open (an endpoint's, `flow_keys.circuit`) reads as parallelism 1:
-- once its cooldown (its back-off) is over, one attempt at a time probes the endpoint.
WITH scanned AS (
    SELECT o.flow_key, o.available_at FROM occurrences AS o
    WHERE o.status = 'pending' AND o.flow_key IS NOT NULL AND NOT o.shelved
      AND o.available_at <= now() + make_interval(secs => :ahead)
    ORDER BY o.available_at
    LIMIT :window
),
due AS (
    SELECT s.flow_key, min(s.available_at) AS first_at FROM scanned AS s GROUP BY s.flow_key
)
SELECT d.flow_key, d.first_at, now() AS now,
       f.rate, f.period_seconds, f.burst,
       CASE WHEN f.circuit = 'open' THEN 1 ELSE f.parallelism END AS parallelism, f.ordering, f.paused,
       f.tokens, f.refilled_at, f.backoff_until,
       (SELECT count(*) FROM scanned) AS scanned
FROM due AS d
LEFT JOIN flow_keys AS f ON f.key = d.flow_key
ORDER BY d.first_at
