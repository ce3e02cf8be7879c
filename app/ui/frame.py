"""What every console page shares: rendering with the console's headers, the live numbers
and a form token; refusals; and the checks a posted form passes before it changes anything
(post, redirect, get)."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.templating import Jinja2Templates

from app.api.hosts import check_origin, console_refusal
from app.domain.errors import ChronoqError, ConflictError, InvalidInputError, NotFoundError
from app.ui.display import environment
from app.ui.forms import FormGuard, Viewer
from app.ui.live import LiveNumbers

FORM_TYPE = "application/x-www-form-urlencoded"

# Pages are this service's own: no other site frames them (clickjacking) or receives their
# addresses, and they load nothing from elsewhere.
_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}


def status_of(exc: ChronoqError) -> int:
    """The status of the page refusing a change the service refused."""
    if isinstance(exc, NotFoundError):
        return 404
    if isinstance(exc, ConflictError):
        return 409
    if isinstance(exc, InvalidInputError):
        return 422
    return 400


def back(request: Request, path: str) -> RedirectResponse:
    """The redirect that answers a form: the browser gets `path` of this console."""
    return RedirectResponse(request.scope.get("root_path", "") + path, status_code=303)


class PageFrame:
    """The console's templates, form guard and live numbers, for one app."""

    def __init__(self, guard: FormGuard | None = None, live: LiveNumbers | None = None) -> None:
        self.templates = Jinja2Templates(env=environment())
        self.guard = guard or FormGuard()
        self.live = live or LiveNumbers()

    async def render(
        self,
        request: Request,
        viewer: Viewer,
        template: str,
        status: int = 200,
        **context: Any,
    ) -> HTMLResponse:
        context.setdefault("notice", None)
        context.update(
            viewer=viewer,
            token=self.guard.issue(viewer) if viewer.can_write else None,
            live=await self.live.read(),
            base=request.scope.get("root_path", ""),
        )
        response = self.templates.TemplateResponse(request, template, context, status_code=status)
        response.headers.update(_HEADERS)
        return response

    async def refuse(
        self, request: Request, viewer: Viewer, status: int, detail: str
    ) -> HTMLResponse:
        return await self.render(
            request, viewer, "refused.html", status, title="Refused", detail=detail
        )

    async def posted(self, request: Request, viewer: Viewer) -> dict[str, list[str]] | HTMLResponse:
        """The form's fields, or the page refusing it: a read key, another site's page, a
        missing or stale token."""
        if not viewer.can_write:
            return await self.refuse(request, viewer, 403, "This API key is read-only.")
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        fields: dict[str, list[str]] = {}
        # Only the console's own encoding is read: a body of any other type carries no token.
        if content_type == FORM_TYPE:
            fields = parse_qs((await request.body()).decode("utf-8", "replace"))
        tokens = fields.get("token", [])
        token = tokens[0] if len(tokens) == 1 else None
        origin = check_origin(request.scope)
        if not origin.same:
            return await self.refuse(request, viewer, 403, console_refusal(origin.compared()))
        if not self.guard.accepts(viewer, token):
            return await self.refuse(
                request,
                viewer,
                403,
                "This form has expired, or was made for another API key: reload the page and "
                "try again.",
            )
        return fields
