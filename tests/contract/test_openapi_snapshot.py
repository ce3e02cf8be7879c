"""The committed OpenAPI document is the one the app serves."""

from __future__ import annotations

import json
from pathlib import Path

from app.main import create_app

SNAPSHOT = Path(__file__).resolve().parents[2] / "openapi" / "openapi.json"


def test_the_committed_openapi_document_matches_the_app() -> None:
    committed = json.loads(SNAPSHOT.read_text(encoding="utf-8"))

    served = create_app().openapi()

    assert served == committed, (
        f"{SNAPSHOT} is out of date with the API; run `make openapi` and commit the result"
    )
