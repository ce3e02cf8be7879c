"""Which tenant the console is in (DESIGN 14): the `tenant=` of its addresses, checked as the
API checks `Chronoq-Tenant` and carried in every link and form of its pages; and the tenants
its header's switcher lists.

An operator key (or anyone, when no keys are set) is in the tenant `tenant=` names, the
default one when it names none; a tenant's key is in its own, and a `tenant=` naming another
is refused (403) as the API refuses the header. The choice rides in the address rather than
in a cookie: each tab keeps its own tenant, a form acts in the tenant of the page that made
it (a switch in another tab cannot redirect it), and an address shows the tenant it is in.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Annotated
from urllib.parse import urlencode

from fastapi import Depends, Request

from app.api.deps import StateDep
from app.domain.errors import InvalidInputError
from app.domain.tenants import DEFAULT_TENANT, check_tenant, missing_tenant
from app.service.tenants import TenantService
from app.ui.forms import Viewer

TENANT_PARAMETER = "tenant"
# The console's lists, where a switch of tenant lands (a schedule, a dead letter or a flow
# key of one tenant is not another's).
SECTIONS = ("schedules", "dead-letters", "flow-keys", "endpoints", "topics", "tenants")
# The switcher lists the first tenants by id; a text field reaches any other.
CHOICES = 200
# How long a replica keeps the switcher's list (one read of the tenants' rows, without their
# usage), so that page views do not each read it. A tenant made since is reached by its id.
CHOICES_SECONDS = 5.0
_SHOWN = 80  # the most of a refused value a page repeats


class TenantRefusedError(Exception):
    """A page was asked for in a tenant its viewer cannot be in. The console answers with
    the page that says why (`status`, `detail`), shown to `viewer`: the key in the tenant
    it is in without `tenant=`."""

    def __init__(self, viewer: Viewer, status: int, detail: str) -> None:
        super().__init__(detail)
        self.viewer = viewer
        self.status = status
        self.detail = detail


async def viewer_of(request: Request, state: StateDep) -> Viewer:
    """The viewer of `Viewer.of`, in the tenant the address names (`tenant=`, empty or
    absent: its own, or the default one)."""
    viewer = Viewer.of(request, state["keys"])
    named = [value for value in request.query_params.getlist(TENANT_PARAMETER) if value]
    if not named:
        return viewer
    if len(named) > 1:
        raise TenantRefusedError(viewer, 422, "The address names more than one tenant.")
    tenant = named[0]
    if viewer.own:
        if tenant != viewer.tenant:
            raise TenantRefusedError(viewer, 403, f"this key acts in tenant {viewer.tenant} only")
        return viewer
    if tenant == DEFAULT_TENANT:
        return viewer
    try:
        check_tenant(tenant, parameter=TENANT_PARAMETER)
    except InvalidInputError as exc:
        shown = tenant[:_SHOWN]
        detail = f"{shown!r} is not a tenant id: {exc.detail}."
        raise TenantRefusedError(viewer, 422, detail) from None
    if not await state["tenants"].exists(tenant):
        detail = f"{missing_tenant(tenant).detail}: choose another in the header."
        raise TenantRefusedError(viewer, 404, detail)
    return replace(viewer, tenant=tenant)


ViewerDep = Annotated[Viewer, Depends(viewer_of)]


def carried(url: str, viewer: Viewer) -> str:
    """`url`, an address of the console, naming the viewer's tenant when its addresses do
    (`Viewer.named_tenant`), before any fragment."""
    tenant = viewer.named_tenant
    if tenant is None:
        return url
    head, mark, fragment = url.partition("#")
    if "?" not in head:
        head += "?"
    elif not head.endswith(("?", "&")):
        head += "&"
    return f"{head}{urlencode({TENANT_PARAMETER: tenant})}{mark}{fragment}"


def section_of(path: str) -> str:
    """The list of the console a page at `path` (under /ui) belongs to."""
    parts = path.split("/ui/", 1)
    head = parts[1].split("/", 1)[0] if len(parts) == 2 else ""
    return head if head in SECTIONS else SECTIONS[0]


def switched(section: str, tenant: str) -> str:
    """The address a switch to `tenant` lands on: the list `section` (one of SECTIONS)."""
    path = f"/ui/{section if section in SECTIONS else SECTIONS[0]}"
    if not tenant or tenant == DEFAULT_TENANT:
        return path
    return f"{path}?{urlencode({TENANT_PARAMETER: tenant})}"


@dataclass(frozen=True, slots=True)
class TenantChoice:
    id: str
    display_name: str | None


@dataclass(frozen=True, slots=True)
class Choices:
    """The switcher's tenants in id order; `full` when the list stopped at CHOICES."""

    tenants: tuple[TenantChoice, ...]
    full: bool

    def holds(self, tenant: str) -> bool:
        return any(choice.id == tenant for choice in self.tenants)


class TenantChoices:
    """The tenants the header's switcher lists: the first CHOICES by id, read through
    `TenantService.list` and kept for CHOICES_SECONDS per app (per service)."""

    def __init__(
        self, *, seconds: float = CHOICES_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._seconds = seconds
        self._clock = clock
        self._kept: weakref.WeakKeyDictionary[TenantService, tuple[float, Choices]] = (
            weakref.WeakKeyDictionary()
        )

    async def read(self, service: TenantService) -> Choices:
        now = self._clock()
        kept = self._kept.get(service)
        if kept is not None and now - kept[0] < self._seconds:
            return kept[1]
        found = await service.list(after=None, limit=CHOICES, usage=False)
        choices = Choices(
            tuple(TenantChoice(t.id, t.display_name) for t in found), full=len(found) >= CHOICES
        )
        self._kept[service] = (now, choices)
        return choices
