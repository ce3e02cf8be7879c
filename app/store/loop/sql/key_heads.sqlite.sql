-- Up to :page flow keys after :after in key order, each with its earliest pending row no key
-- shelved (`first_at`), and the transaction's instant: the claim's looks page through the
-- keys with these to put to sleep those with nothing due for a while, whether or not a walk
-- of the keys ever comes. A loose index scan of `ix_occurrences_flow`, one probe per key,
-- that stops at the page's end (the recursion's LIMIT).
WITH RECURSIVE keyed(flow_key) AS (
    SELECT min(o.flow_key) FROM occurrences AS o
    WHERE o.status = 'pending' AND o.flow_key IS NOT NULL AND NOT o.shelved
      AND o.flow_key > :after
    UNION ALL
    SELECT (
        SELECT min(o.flow_key) FROM occurrences AS o
        WHERE o.status = 'pending' AND o.flow_key IS NOT NULL AND NOT o.shelved
          AND o.flow_key > k.flow_key
    )
    FROM keyed AS k
    WHERE k.flow_key IS NOT NULL
    LIMIT :page + 1
)
SELECT k.flow_key, (
    SELECT min(o.available_at) FROM occurrences AS o
    WHERE o.status = 'pending' AND o.flow_key IS NOT NULL AND NOT o.shelved
      AND o.flow_key = k.flow_key
) AS first_at, :now AS now
FROM keyed AS k
WHERE k.flow_key IS NOT NULL
LIMIT :page
