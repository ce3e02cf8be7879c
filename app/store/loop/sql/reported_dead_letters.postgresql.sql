-- The dead letters among :dead_ids that this transaction made (a late settle whose lease
-- was taken over dead-letters nothing), but for failure callbacks, each with what its
-- failure callback reports and its schedule's `on_failure` (app/store/loop/callbacks.py
-- writes a callback for each that has one). The payload as text, sent as it is (and no
-- decoder meets what it cannot read).
SELECT o.occurrence_id, o.schedule_id, o.fire_at, o.attempts, o.last_error,
       o.dead_lettered_at, s.event_type, CAST(s.payload AS TEXT) AS payload, s.on_failure
FROM occurrences AS o
JOIN schedules AS s ON s.id = o.schedule_id
WHERE o.occurrence_id = ANY(:dead_ids)
  AND o.status = 'dead_lettered'
  AND o.dead_lettered_at = now()
  AND o.origin <> 'callback'
