"""The typed client of the Chronoq HTTP API (`app.client`, which documents it), under the
name integrations import it by:

    from chronoq.client import Client

`app.client` stays importable as well, for code written against it.
"""

from app.client import *  # noqa: F403 (the whole public surface, as app.client lists it)
from app.client import __all__ as __all__
from app.client import calls as calls
