"""Broker errors as HTTP responses: ``{"error": code, "message": ...}``.

The codes are the CLI's (spec §Errors); the status says the class of failure.
Bad input is never a 500: a 500 means a bug, and is logged with its traceback.
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.responses import JSONResponse

from broker import errors
from broker.frontends.http.edge import clipped

log = logging.getLogger("broker.server")

# Most specific first: the first class an error is an instance of decides.
STATUS: tuple[tuple[type[errors.BrokerError], int], ...] = (
    (errors.BodyTooLarge, 413),
    (errors.InvalidInput, 422),
    (errors.NotFound, 404),
    (errors.AuthError, 401),
    (errors.Forbidden, 403),
    (errors.NotDelivered, 409),  # logged and committed, then refused (S8)
    (errors.MessagingFull, 409),
    (errors.HoldsFull, 429),  # S41: exhaustion is a refusal with Retry-After
    (errors.Conflict, 409),
    (errors.StoreBusy, 503),
    (errors.SchemaOutOfDate, 503),
    (errors.StoreTooNew, 503),
    (errors.TooManyWaits, 429),
    (errors.Exhausted, 503),
)

# What each status means, for the OpenAPI document.
DESCRIPTIONS = {
    401: "missing, wrong or stale credentials (auth_failed)",
    403: "known caller, not allowed: an agent token on an operator endpoint, tool_unavailable",
    404: "no such space, participant, message or directive",
    409: "space not running, conflict, lease lost, key held, not delivered (S8), messaging full",
    413: "request body or message body too large (body_too_large)",
    422: "invalid input, naming the field (invalid_input); nothing written",
    429: "the caller or its space holds all the live claims its limits allow (holds_full), "
    "or too many waits parked by this participant or its space (too_many_waits); retry",
    503: "the store stayed busy past its timeout, the database is full (too_many_connections), "
    "the server is at its file budget (server_busy), or the store's schema is not this "
    "broker's (schema_out_of_date, store_too_new); retry",
}


def status_of(exc: errors.BrokerError) -> int:
    for cls, status in STATUS:
        if isinstance(exc, cls):
            return status
    return 500


def error_body(exc: errors.BrokerError) -> dict[str, Any]:
    body = exc.to_dict()
    body["message"] = str(exc.message)
    return clipped(body)


def error_response(exc: errors.BrokerError) -> JSONResponse:
    status = status_of(exc)
    headers = {"WWW-Authenticate": 'Bearer realm="broker"'} if status == 401 else None
    if status in (429, 503):
        # S41: a refusal for a full resource says when to come back.
        headers = {"Retry-After": str(exc.fields.get("retry_after", 1))}
        if isinstance(exc, errors.ServerBusy):
            headers["Connection"] = "close"  # its descriptor is what the server lacks
    if status == 500:
        log.error("server error %s: %s", exc.code, exc.message)
    return JSONResponse(error_body(exc), status_code=status, headers=headers)


def plain(code: str, message: str, status: int) -> JSONResponse:
    """An error the HTTP layer finds before the library runs (bad JSON, no route)."""
    headers = {"WWW-Authenticate": 'Bearer realm="broker"'} if status == 401 else None
    return JSONResponse({"error": code, "message": message}, status_code=status, headers=headers)
