-- A cancel of a schedule (:schedule_id) cancels its pending occurrences at :now. An attempt
-- in flight keeps its lease token: its settle changes nothing, but its attempt is still
-- recorded in the log (and a keyed one's lease ends then, named SQL `end_cancelled_leases`).
UPDATE occurrences SET status = 'cancelled', available_at = NULL, updated_at = :now
WHERE schedule_id = :schedule_id AND status = 'pending'
