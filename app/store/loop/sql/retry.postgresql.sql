-- A settled attempt that failed and will be tried again: the occurrence (:b_id) that its
-- lease (:b_token) still holds is due again :b_delay seconds from now, with its error. A
-- retry due while the schedule is paused stays set; the claim skips paused schedules, so
-- it waits for the resume.
UPDATE occurrences SET
    available_at = now() + make_interval(secs => :b_delay),
    lease_token = NULL,
    last_error = :b_error,
    updated_at = now()
WHERE occurrence_id = :b_id AND lease_token = :b_token AND status = 'pending'
