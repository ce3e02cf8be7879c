-- The keyed claim found due rows of keys (:keys) that are paused or backing off, under
-- their locks: their pending rows that no lease holds leave its index (`shelved`), so
-- that no later claim visits them until the key may start again, and the key says it
-- holds some (`shelving`). A row that arrives later is held by the claim that finds it.
UPDATE occurrences SET shelved = true
WHERE occurrences.flow_key IN :keys
  AND occurrences.status = 'pending'
  AND occurrences.lease_token IS NULL
  AND NOT occurrences.shelved;

UPDATE flow_keys SET shelving = true
WHERE flow_keys.`key` IN :keys AND NOT flow_keys.shelving
