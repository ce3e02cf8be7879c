"""Chronoq's public import names for code that uses the service: `chronoq.client`, the
typed client of its HTTP API. The service itself is the `app` package of the same wheel."""
