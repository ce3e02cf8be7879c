"""What every console page shares: rendering with the console's headers, the live numbers,
the tenant switcher and a form token; addresses that keep the page's tenant; refusals; and
the checks a posted form passes before it changes anything (post, redirect, get)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, cast
from urllib.parse import parse_qs

from fastapi import Request
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.templating import Jinja2Templates

from app.api.deps import State
from app.api.hosts import check_origin, console_refusal
from app.api.schemas import Page
from app.domain.activity import Activity, Window
from app.domain.errors import (
    ChronoqError,
    ConflictError,
    ForbiddenError,
    InvalidInputError,
    NotFoundError,
)
from app.domain.tenants import Caller
from app.ui.display import environment
from app.ui.forms import FormGuard, Viewer
from app.ui.live import LiveNumbers
from app.ui.query import filter_value, link
from app.ui.tenancy import TenantChoices, carried, section_of

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
    if isinstance(exc, ForbiddenError):
        return 403
    if isinstance(exc, ConflictError):
        return 409
    if isinstance(exc, InvalidInputError):
        return 422
    return 400


def back(request: Request, viewer: Viewer, path: str) -> RedirectResponse:
    """The redirect that answers a form: the browser gets `path` of this console, in the
    viewer's tenant."""
    url = carried(request.scope.get("root_path", "") + path, viewer)
    return RedirectResponse(url, status_code=303)


async def _fleet(request: Request, viewer: Viewer) -> Activity | None:
    """The fleet's last hour for the header: none for a tenant's own key, which is shown
    no installation figures."""
    if viewer.own:
        return None
    state = cast(State, request.state._state)
    return await state["activity"].read(Caller(), Window.HOUR)


class PageFrame:
    """The console's templates, form guard, live numbers and the switcher's tenants."""

    def __init__(
        self,
        guard: FormGuard | None = None,
        live: LiveNumbers | None = None,
        choices: TenantChoices | None = None,
    ) -> None:
        self.templates = Jinja2Templates(env=environment())
        self.guard = guard or FormGuard()
        self.live = live or LiveNumbers()
        self.choices = choices or TenantChoices()

    async def render(
        self,
        request: Request,
        viewer: Viewer,
        template: str,
        status: int = 200,
        *,
        whole: bool = True,
        **context: Any,
    ) -> HTMLResponse:
        """`template` with `context`; `whole` for a page with the header (its switcher
        lists the tenants), not for a part of one."""
        base = request.scope.get("root_path", "")
        context.setdefault("notice", None)
        switcher = None
        if whole and viewer.switches:
            state = cast(State, request.state._state)
            switcher = await self.choices.read(state["tenants"])
        context.update(
            viewer=viewer,
            token=self.guard.issue(viewer) if viewer.can_write else None,
            live=await self.live.read(await _fleet(request, viewer)),
            base=base,
            # A console address in the viewer's tenant: `href("/ui/schedules?x=1")`.
            href=lambda path: carried(base + path, viewer),
            switcher=switcher,
            section=section_of(request.url.path),
        )
        response = self.templates.TemplateResponse(request, template, context, status_code=status)
        response.headers.update(_HEADERS)
        return response

    async def listed(
        self,
        request: Request,
        viewer: Viewer,
        template: str,
        title: str,
        read: Callable[[str | None], Awaitable[Page[Any]]],
        **context: Any,
    ) -> HTMLResponse:
        """A list page: the page `read(cursor)` gives for the address's cursor, with the
        link to the next one; a cursor this console never issued is said on the page
        (422), as the API refuses it."""
        query = request.query_params
        error: str | None = None
        items: list[Any] = []
        next_url: str | None = None
        try:
            page = await read(filter_value(query, "cursor"))
            items = page.items
            if page.next_cursor is not None:
                next_url = link({}, cursor=page.next_cursor)
        except InvalidInputError as exc:
            error = exc.detail
        return await self.render(
            request,
            viewer,
            template,
            422 if error else 200,
            title=title,
            items=items,
            next_url=next_url,
            paged=bool(query.get("cursor")),
            error=error,
            **context,
        )

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
            # An emptied field is sent, and kept: it says "none", where a field the form did
            # not hold says nothing.
            body = (await request.body()).decode("utf-8", "replace")
            fields = parse_qs(body, keep_blank_values=True)
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
