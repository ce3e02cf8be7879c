"""Use cases, one transaction each, shared by the HTTP API and the CLI."""
