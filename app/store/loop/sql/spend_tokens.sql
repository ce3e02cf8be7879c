-- The tokens a keyed claim's leases spent, written back to the key's (:b_key) bucket:
-- :b_tokens left as of :b_at, the instant its refill counts from.
UPDATE flow_keys SET tokens = :b_tokens, refilled_at = :b_at
WHERE flow_keys."key" = :b_key
