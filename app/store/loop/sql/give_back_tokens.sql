-- Tokens (:b_count) back into a flow key's (:b_key) bucket, up to its capacity (its burst,
-- else its rate); a full bucket (no tokens stored) stays full, and a key without a rate
-- has none.
UPDATE flow_keys SET tokens = CASE
    WHEN flow_keys.tokens + :b_count > coalesce(flow_keys.burst, flow_keys.rate)
    THEN coalesce(flow_keys.burst, flow_keys.rate)
    ELSE flow_keys.tokens + :b_count
END
WHERE flow_keys."key" = :b_key AND flow_keys.tokens IS NOT NULL AND flow_keys.rate IS NOT NULL
