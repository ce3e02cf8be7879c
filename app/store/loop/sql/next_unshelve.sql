-- The soonest instant after :now at which a back-off of a key shelving rows ends, for the
-- loop's sleep (`ix_flow_keys_unshelving`; NULL: none will).
SELECT min(flow_keys.backoff_until) AS until
FROM flow_keys
WHERE flow_keys.shelving AND NOT flow_keys.paused AND flow_keys.backoff_until > :now
