-- The leases of keyed attempts whose occurrences (:ids, held by :token) were cancelled
-- while they ran, ended: the cancel kept the token (the attempt is still logged), so the
-- settle or the release ends it, and the key's slot is free now rather than when the lease
-- runs out.
UPDATE occurrences SET lease_token = NULL
WHERE occurrences.occurrence_id IN :ids
  AND occurrences.lease_token = :token
  AND occurrences.status = 'cancelled'
