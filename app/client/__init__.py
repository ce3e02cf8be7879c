"""A typed client of the Chronoq HTTP API, synchronous and asynchronous, on httpx.

    from chronoq.client import Client  # its public name (chronoq/client.py)

    with Client("http://127.0.0.1:8000", api_key="...") as chronoq:
        schedule = chronoq.create_schedule({...})
        for dead in chronoq.iter_dead_letters(schedule_id=schedule.id):
            chronoq.replay_dead_letter(dead.occurrence_id)

Answers are the models `openapi/openapi.json` describes (`ScheduleOut`, `Page`, ...);
refusals are `ProblemError`s, one class per status, with the offending fields; an answer
that is not the API's (a redirect, a page that is not JSON) is an `UnexpectedAnswerError`;
a service that cannot be reached, an `UnreachableError`. No message of these, and no log
line of httpx's, carries the password of the service's URL.
"""

from app.api.endpoint_schemas import (
    CircuitIn,
    CircuitOut,
    EndpointAttemptOut,
    EndpointEventOut,
    EndpointIn,
    EndpointOut,
    EndpointPatch,
    FlowOut,
    RotateIn,
    SecretOut,
)
from app.api.flow_key_schemas import FlowKeyIn, FlowKeyOut, FlowLimitsIn
from app.api.occurrence_schemas import (
    AttemptOut,
    DeadLetterOut,
    DeliveryOut,
    OccurrenceOut,
    ReplayAccepted,
    Replayed,
)
from app.api.schedule_schemas import BackfillResult, BatchCreated, ScheduleEventOut, ScheduleOut
from app.api.schemas import Health, Page
from app.api.tenant_schemas import (
    MadeKey,
    TenantEventOut,
    TenantIn,
    TenantKeyIn,
    TenantKeyOut,
    TenantOut,
)
from app.api.topic_schemas import (
    SubscriptionIn,
    SubscriptionOut,
    SubscriptionPatch,
    TopicIn,
    TopicOut,
)
from app.api.trigger_schemas import Preview, PreviewRequest
from app.client.calls import Call
from app.client.clients import AsyncClient, Client
from app.client.errors import (
    BadRequestError,
    ChronoqClientError,
    ConflictError,
    FieldError,
    ForbiddenError,
    NotFoundError,
    PayloadTooLargeError,
    PreconditionFailedError,
    ProblemError,
    UnauthorizedError,
    UnavailableError,
    UnexpectedAnswerError,
    UnreachableError,
    ValidationError,
)
from app.domain.schedule import SchedulePatch, ScheduleSpec

__all__ = [
    "AsyncClient",
    "AttemptOut",
    "BackfillResult",
    "BadRequestError",
    "BatchCreated",
    "Call",
    "ChronoqClientError",
    "CircuitIn",
    "CircuitOut",
    "Client",
    "ConflictError",
    "DeadLetterOut",
    "DeliveryOut",
    "EndpointAttemptOut",
    "EndpointEventOut",
    "EndpointIn",
    "EndpointOut",
    "EndpointPatch",
    "FieldError",
    "FlowKeyIn",
    "FlowKeyOut",
    "FlowLimitsIn",
    "FlowOut",
    "ForbiddenError",
    "Health",
    "MadeKey",
    "NotFoundError",
    "OccurrenceOut",
    "Page",
    "PayloadTooLargeError",
    "PreconditionFailedError",
    "Preview",
    "PreviewRequest",
    "ProblemError",
    "ReplayAccepted",
    "Replayed",
    "RotateIn",
    "ScheduleEventOut",
    "ScheduleOut",
    "SchedulePatch",
    "ScheduleSpec",
    "SecretOut",
    "SubscriptionIn",
    "SubscriptionOut",
    "SubscriptionPatch",
    "TenantEventOut",
    "TenantIn",
    "TenantKeyIn",
    "TenantKeyOut",
    "TenantOut",
    "TopicIn",
    "TopicOut",
    "UnauthorizedError",
    "UnavailableError",
    "UnexpectedAnswerError",
    "UnreachableError",
    "ValidationError",
]
