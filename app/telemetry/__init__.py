"""What a replica tells its operators: logs, Prometheus metrics, OpenTelemetry traces."""
