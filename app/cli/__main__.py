"""`python -m app.cli`: the `chronoq` command."""

from app.cli.command import main

raise SystemExit(main())
