-- Keys (:keys) that may start again (resumed, their back-off over, or gone) give back the
-- rows they held: each is in the keyed claim's index again, due at its own instant.
UPDATE occurrences SET shelved = false
WHERE occurrences.flow_key IN :keys
  AND occurrences.status = 'pending'
  AND occurrences.shelved;

UPDATE flow_keys SET shelving = false
WHERE flow_keys.`key` IN :keys AND flow_keys.shelving
