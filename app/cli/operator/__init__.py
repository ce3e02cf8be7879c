"""The operator commands of `chronoq`: over HTTP against a running service, or straight
against its database."""
