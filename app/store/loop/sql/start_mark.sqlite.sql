-- Start marks (`Dialect.mark_started` says what they mean) of the asked occurrences
-- (:ids) that one lease (:token) holds: marked started where the lease still holds and
-- nothing stopped them since the claim (a cancel, a pause of the schedule, which holds no
-- failure callback), and returned.
UPDATE occurrences SET lease_ahead = 0
WHERE occurrence_id IN :ids
  AND lease_token = :token
  AND coalesce(status, '') = 'pending' AND available_at IS NOT NULL
  AND NOT EXISTS (
      SELECT 1 FROM schedules AS s
      WHERE s.id = occurrences.schedule_id AND s.status = 'paused'
        AND occurrences.origin <> 'callback'
  )
RETURNING occurrence_id
