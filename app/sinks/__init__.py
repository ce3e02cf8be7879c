"""Outbound delivery to targets; no database access."""
