-- One part of the keyed claim's candidates (app/store/loop/flow_claims.py joins one per key
-- it may start something of, UNION ALL): a fifo key's (:key) head, its earliest pending
-- occurrence by fire instant, then id, due or not (a head that is not due holds the key).
-- A probe of the key's index range, however many of its rows wait. A paused schedule's
-- rows are none of it.
SELECT head.occurrence_id, head.flow_key, head.available_at, head.first_attempt_at
FROM (
    SELECT occurrences.occurrence_id, occurrences.flow_key, occurrences.available_at,
           occurrences.first_attempt_at
    FROM occurrences
    WHERE occurrences.status = 'pending'
      AND occurrences.flow_key IS NOT NULL
      AND occurrences.flow_key = :key
      AND occurrences.available_at IS NOT NULL
      AND NOT EXISTS (
          SELECT 1 FROM schedules
          WHERE schedules.id = occurrences.schedule_id AND schedules.status = 'paused'
      )
    ORDER BY occurrences.fire_at, occurrences.occurrence_id
    LIMIT 1
) AS head
