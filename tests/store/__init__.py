"""The store conformance suite: every dialect of the store passes the same tests."""
