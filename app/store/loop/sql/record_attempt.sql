-- One settled attempt into the attempt log (`Dialect.record_attempts`), run for each.
INSERT INTO attempts (id, occurrence_id, attempt, started_at, duration_ms, outcome,
                      status_code, error, response_excerpt, replica, trace_id, endpoint_id,
                      fire_at, tenant, flow_key)
VALUES (:id, :occurrence_id, :attempt, :started_at, :duration_ms, :outcome,
        :status_code, :error, :response_excerpt, :replica, :trace_id, :endpoint_id,
        :fire_at, :tenant, :flow_key)
