-- A claim handed back (app/store/loop/releases.py says when): the occurrence (:b_id) that
-- its lease (:b_token) still holds goes back to pending, due at :b_at, or, while a pause
-- holds it (no available_at), keeps :b_at to be given back at the resume. An attempt that
-- never started gives back the attempt its claim counted (:uncounted 1, else 0). One that
-- could not be sent says why in last_error until it is (:unsent, with :b_error).
-- In this order: MySQL assigns left to right, each assignment seeing the ones before it,
-- so whether the row is held is read before available_at changes.
UPDATE occurrences SET
    held_until = CASE WHEN available_at IS NULL THEN :b_at ELSE held_until END,
    available_at = CASE WHEN available_at IS NULL THEN NULL ELSE :b_at END,
    attempts = attempts - :uncounted,
    lease_ahead = false,
    last_error = CASE WHEN :unsent THEN :b_error ELSE last_error END,
    lease_token = NULL,
    updated_at = :now
WHERE occurrence_id = :b_id AND lease_token = :b_token AND coalesce(status, '') = 'pending'
