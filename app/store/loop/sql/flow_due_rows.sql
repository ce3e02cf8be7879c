-- One part of the keyed claim's candidates (app/store/loop/flow_claims.py joins one per key
-- it may start something of, UNION ALL): up to :most due rows (by :now) of a key (:key)
-- that is not fifo, in the order they fell due. A probe of the key's index range, however
-- many of its rows wait. A paused schedule's rows are none of it.
SELECT due.occurrence_id, due.flow_key, due.available_at, due.first_attempt_at
FROM (
    SELECT occurrences.occurrence_id, occurrences.flow_key, occurrences.available_at,
           occurrences.first_attempt_at
    FROM occurrences
    WHERE occurrences.status = 'pending'
      AND occurrences.flow_key IS NOT NULL
      AND occurrences.flow_key = :key
      AND NOT occurrences.shelved
      AND occurrences.available_at IS NOT NULL
      AND NOT EXISTS (
          SELECT 1 FROM schedules
          WHERE schedules.id = occurrences.schedule_id AND schedules.status = 'paused'
      )
      AND occurrences.available_at <= :now
    ORDER BY occurrences.available_at
    LIMIT :most
) AS due
