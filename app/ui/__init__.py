"""The operator console at /ui: server-rendered pages over the services the API calls."""
