-- A settle's deliveries (`Dialect.mark_delivered` says what they mean), in one statement
-- whatever the claims they came from: each asked pair of occurrence (:ids) and lease token
-- (:tokens, at the same position) delivered where that lease still holds it, then each
-- schedule it delivered restarts its count of dead letters in a row from 0 (only those
-- counting: most schedules never fail, and are not written). A failure callback delivered
-- is no delivery of its schedule's.
-- The status is tested as an expression no partial index is defined on: the rows are
-- found by key, never through an index of pending rows (whose estimate lags a burst).
WITH delivered AS (
    UPDATE occurrences SET
        status = 'delivered',
        delivered_at = now(),
        available_at = NULL,
        updated_at = now(),
        lease_token = NULL,
        last_error = NULL
    WHERE occurrence_id = ANY(:ids)
      AND lease_token = (:tokens)[array_position(:ids, occurrence_id)]
      AND coalesce(status, '') = 'pending'
    RETURNING schedule_id, origin
)
UPDATE schedules SET consecutive_failures = 0
WHERE schedules.id IN (SELECT d.schedule_id FROM delivered AS d WHERE d.origin <> 'callback')
  AND schedules.consecutive_failures > 0
