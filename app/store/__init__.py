"""Persistence: the only package that knows SQL and the database drivers."""
