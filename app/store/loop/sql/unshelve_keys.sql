-- Keys (:keys) that may start again (resumed, their back-off over, or gone) unshelve their
-- rows: each is in the keyed claim's index again, due at its own instant.
UPDATE occurrences SET shelved = false
WHERE occurrences.flow_key IN :keys
  AND occurrences.status = 'pending'
  AND occurrences.shelved
