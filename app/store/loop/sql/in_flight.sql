-- Per flow key of :keys, its attempts in flight at :now: rows whose lease has not ended,
-- whatever their status. Only the claim writes a lease's end (`lease_until`), and only a
-- claim, a settle or a release ends a lease (clearing its token): a pause or a cancel stops
-- what has not started, never an attempt that runs, which holds its slot until it is
-- settled or its lease runs out (a replica that died frees it by itself). The first
-- condition repeats the index's own (FLOW_LEASED), so that it is usable.
SELECT occurrences.flow_key, count(*) AS in_flight
FROM occurrences
WHERE flow_key IS NOT NULL AND lease_token IS NOT NULL
  AND occurrences.flow_key IN :keys
  AND occurrences.lease_until > :now
GROUP BY occurrences.flow_key
