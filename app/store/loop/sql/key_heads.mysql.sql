-- Up to :page flow keys after :after in key order, each with its earliest pending row no key
-- shelved (`first_at`), and the transaction's instant: the claim's looks page through the
-- keys with these to put to sleep those with nothing due for a while, whether or not a walk
-- of the keys ever comes. A loose index scan of the claim index
-- `(status, flow_key, available_at)` from :after, that stops at the page's end.
SELECT o.flow_key, MIN(o.available_at) AS first_at, CAST(:now AS DATETIME(6)) AS now
FROM occurrences AS o
WHERE o.status = 'pending' AND o.flow_key IS NOT NULL AND NOT o.shelved AND o.flow_key > :after
GROUP BY o.flow_key
ORDER BY o.flow_key
LIMIT :page
