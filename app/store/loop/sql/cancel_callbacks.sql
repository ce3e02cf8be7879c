-- A schedule's (:schedule_id) failure callbacks not yet delivered, cancelled at :now: its
-- `on_failure` target is gone. One in flight settles nothing, as with `cancel_pending`.
UPDATE occurrences SET status = 'cancelled', available_at = NULL, updated_at = :now
WHERE schedule_id = :schedule_id AND status = 'pending' AND origin = 'callback'
