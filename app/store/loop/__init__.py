"""The delivery loop's statements: claim, start, settle, release, complete, count
failures, write callbacks, and the flow-key limits they keep."""
