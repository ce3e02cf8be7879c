"""The background delivery loop."""
