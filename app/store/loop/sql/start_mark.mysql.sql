-- Start marks (`Dialect.mark_started` says what they mean) of the asked occurrences
-- (:ids) that one lease (:token) holds: marked started where the lease still holds and
-- nothing stopped them since the claim (a cancel, a pause of the schedule, which holds no
-- failure callback). MySQL has no UPDATE ... RETURNING: the second statement reads back
-- which were marked, when the first did not match every one asked.
UPDATE occurrences AS o SET o.lease_ahead = false
WHERE o.occurrence_id IN :ids
  AND o.lease_token = :token
  AND coalesce(o.status, '') = 'pending' AND o.available_at IS NOT NULL
  AND NOT EXISTS (
      SELECT 1 FROM schedules AS s
      WHERE s.id = o.schedule_id AND s.status = 'paused' AND o.origin <> 'callback'
  );
SELECT o.occurrence_id FROM occurrences AS o
WHERE o.occurrence_id IN :ids
  AND o.lease_token = :token
  AND coalesce(o.status, '') = 'pending' AND NOT o.lease_ahead
