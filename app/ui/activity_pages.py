"""The console's activity charts: the fleet's page (/ui/activity), and the chart section of
a schedule's, flow key's, tenant's and endpoint's page. Each reads what GET /v1/activity
answers (`ActivityService`), in the viewer's tenant, over the window the address names
(`?window=1h`, the default, or `24h`), and draws it on the server (`app.ui.charts`): the
charts need no script."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import cast

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from markupsafe import Markup

from app.api.deps import State
from app.domain.activity import Window
from app.domain.errors import InvalidInputError
from app.ui.charts import activity_chart
from app.ui.forms import Viewer
from app.ui.frame import PageFrame
from app.ui.query import link
from app.ui.tenancy import ViewerDep

WINDOW = "window"
WINDOW_NAMES = {Window.HOUR: "last hour", Window.DAY: "last day"}


@dataclass(frozen=True, slots=True)
class ChartView:
    """A chart section: the chart, its window, and the same page's address over each
    window."""

    chart: Markup
    window: Window
    links: dict[str, str]  # a window's name -> the query string of this page over it


def window_of(request: Request) -> Window:
    """The window the address names; another is refused naming `window`."""
    named = request.query_params.get(WINDOW, Window.HOUR.value)
    try:
        return Window(named)
    except ValueError:
        raise InvalidInputError(
            f"window is one of {', '.join(w.value for w in Window)}", parameter=WINDOW
        ) from None


async def chart_view(
    request: Request,
    viewer: Viewer,
    *,
    tenant: str | None = None,
    schedule_id: uuid.UUID | None = None,
    flow_key: str | None = None,
    endpoint_id: uuid.UUID | None = None,
) -> ChartView:
    """The chart of at most one subject (none: the fleet, or a tenant key's own tenant)
    over the address's window."""
    window = window_of(request)
    state = cast(State, request.state._state)
    found = await state["activity"].read(
        viewer.caller,
        window,
        tenant=tenant,
        schedule_id=schedule_id,
        flow_key=flow_key,
        endpoint_id=endpoint_id,
    )
    kept = {k: v for k, v in request.query_params.items() if k != WINDOW}
    links = {
        name: link(kept, **({} if w is Window.HOUR else {WINDOW: w.value}))
        for w, name in WINDOW_NAMES.items()
    }
    return ChartView(chart=activity_chart(found), window=window, links=links)


def add_activity_routes(routes: APIRouter, frame: PageFrame) -> None:
    @routes.get("/activity", response_class=HTMLResponse)
    async def activity(request: Request, who: ViewerDep) -> HTMLResponse:
        """The fleet's activity (a tenant key's: its tenant's)."""
        try:
            view = await chart_view(request, who)
        except InvalidInputError as exc:
            return await frame.refuse(request, who, 422, exc.detail)
        return await frame.render(request, who, "activity.html", title="Activity", activity=view)
