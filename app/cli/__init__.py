"""The `chronoq` command: serving, the database chores, and the operator commands."""
