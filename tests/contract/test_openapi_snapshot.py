"""The committed OpenAPI document is the one the app serves."""

from __future__ import annotations

import json
from pathlib import Path

from app.api.problems import documented_paths
from app.main import create_app

SNAPSHOT = Path(__file__).resolve().parents[2] / "openapi" / "openapi.json"


def test_the_committed_openapi_document_matches_the_app() -> None:
    committed = json.loads(SNAPSHOT.read_text(encoding="utf-8"))

    served = create_app().openapi()

    assert served == committed, (
        f"{SNAPSHOT} is out of date with the API; run `make openapi` and commit the result"
    )


def test_the_methods_a_405_advertises_are_read_from_the_routes_as_the_document_lists_them() -> None:
    """A 405's Allow and the batch path's 405 come from the routes, not from the document
    (building it takes a third of a second): both must list the same paths and methods."""
    app = create_app()

    documented = {
        path: {method.upper() for method in operations}
        for path, operations in app.openapi()["paths"].items()
    }

    assert documented_paths(app.routes) == documented
