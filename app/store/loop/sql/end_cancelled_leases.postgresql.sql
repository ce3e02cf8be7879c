-- The leases of keyed attempts whose occurrences were cancelled while they ran, ended, in
-- one statement whatever the claims they came from: each asked pair of occurrence (:ids)
-- and lease token (:tokens, at the same position) where that lease still holds it. The
-- cancel kept the token (the attempt is still logged), so the settle or the release ends
-- it, and the key's slot is free now rather than when the lease runs out.
UPDATE occurrences SET lease_token = NULL
WHERE occurrence_id = ANY(:ids)
  AND lease_token = (:tokens)[array_position(:ids, occurrence_id)]
  AND coalesce(status, '') = 'cancelled'
