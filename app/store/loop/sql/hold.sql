-- A pause holds its schedule's pending occurrences (:schedule_id): unclaimable, each keeping
-- its instant (held_until) to be given back at the resume; but for its failure callbacks,
-- which report what already failed (an auto-pause's own dead letter too).
-- In this order: MySQL assigns left to right, each assignment seeing the ones before it,
-- so the instant is kept before it is cleared.
UPDATE occurrences SET
    held_until = coalesce(available_at, held_until),
    available_at = NULL,
    updated_at = :now
WHERE schedule_id = :schedule_id AND status = 'pending' AND origin <> 'callback'
