-- A resume gives each held occurrence of its schedule (:schedule_id) back its own instant
-- (its jittered fire instant, its retry instant or its lease's end); one held without an
-- instant (a replay or a backfill made during the pause) is due now.
-- A row asleep wakes (its key's sleep row covers only rows with an instant; the claim puts
-- it to sleep again if it is far off, or shelves it again if its key holds it).
-- In this order: the instant is given back before it is cleared (MySQL assigns left to
-- right).
UPDATE occurrences SET
    available_at = coalesce(held_until, :now),
    held_until = NULL,
    shelved = false,
    updated_at = :now
WHERE schedule_id = :schedule_id AND status = 'pending' AND available_at IS NULL
