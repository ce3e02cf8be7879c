"""Chronoq: a durable message scheduler."""
