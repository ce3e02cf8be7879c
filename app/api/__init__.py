"""HTTP API: thin routes that parse, call a service, and render."""
