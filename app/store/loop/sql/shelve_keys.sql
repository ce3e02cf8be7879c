-- The keyed claim found due rows of keys (:keys) that are paused or backing off, under
-- their locks: it shelves their pending rows that no lease holds, which leave its index
-- (`shelved`), so that no later claim visits them until the key may start again (the
-- caller marks the keys `shelving`). A row that arrives later is shelved by the claim that
-- finds it.
UPDATE occurrences SET shelved = true
WHERE occurrences.flow_key IN :keys
  AND occurrences.status = 'pending'
  AND occurrences.lease_token IS NULL
  AND NOT occurrences.shelved
