-- A finished schedule's event (named SQL `finish`), run for each: of the kind of its new
-- status, at its version (finishing is no change a client makes: the version stays).
INSERT INTO schedule_events (id, schedule_id, kind, version, actor, fields, at)
VALUES (:id, :schedule_id, :kind, :version, :actor, :fields, :now)
