"""The records the API reads and changes: schedules and their lifecycle, events, dead
letters, flow keys, attempts, the backlog, and retention."""
