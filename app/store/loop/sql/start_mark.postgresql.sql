-- Start marks (`Dialect.mark_started` says what they mean), in one statement: each asked
-- pair of occurrence (:ids) and lease token (:tokens, at the same position) marked started
-- where the lease still holds and nothing stopped it since the claim (a cancel, a pause of
-- its schedule, which holds no failure callback), and returned. Its commit does not wait
-- for the disk (set for its own transaction, read once): a mark lost with the database
-- reads as never started, which is harmless. The status is tested as an expression no
-- partial index is defined on: rows inserted since the table was last analysed must not
-- make the plan a scan of every pending row.
UPDATE occurrences AS o SET lease_ahead = false
WHERE o.occurrence_id = ANY(:ids)
  AND o.lease_token = (:tokens)[array_position(:ids, o.occurrence_id)]
  AND coalesce(o.status, '') = 'pending' AND o.available_at IS NOT NULL
  AND NOT EXISTS (
      SELECT 1 FROM schedules AS s
      WHERE s.id = o.schedule_id AND s.status = 'paused' AND o.origin <> 'callback'
  )
  AND (SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL
RETURNING o.occurrence_id
