"""Rules and value types of the scheduler: no I/O, no clock reads, no settings."""
