"""The store's engine: the database and its pools, its clock, wake-ups, the schema's
creation and migrations."""
