-- Of the occurrences of :ids, those the lease :token still holds (a cancel keeps the token
-- of an attempt in flight).
SELECT occurrences.occurrence_id
FROM occurrences
WHERE occurrences.occurrence_id IN :ids
  AND occurrences.lease_token = :token
  AND occurrences.status IN ('pending', 'cancelled')
