"""One error root for the whole broker.

Every failure a caller can see is a ``BrokerError`` subclass carrying structured
fields; driver errors are wrapped once, at the db boundary (``broker.store.sqlite``). The
CLI maps ``exit_code`` to the process exit status and prints ``str(err)`` as a
single line, so messages here are written for humans and never span lines.
"""

from __future__ import annotations

from typing import Any


class BrokerError(Exception):
    """Root of every error the broker raises on purpose."""

    code: str = "broker_error"
    exit_code: int = 1

    def __init_subclass__(cls, *, code: str = "", exit_code: int = 0, **kw: Any) -> None:
        """A subclass names its code, and a family its exit status, in its
        class line (``class LeaseLost(Conflict, code="lease_lost")``); what it
        leaves out it inherits."""
        super().__init_subclass__(**kw)
        if code:
            cls.code = code
        if exit_code:
            cls.exit_code = exit_code

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.message = message
        self.fields = fields

    def to_dict(self) -> dict[str, Any]:
        return {"error": self.code, "message": self.message, **self.fields}

    def in_item(self, n: int, where: str = "items") -> BrokerError:
        """The same refusal, naming the batch item it is about and its field: ``bad
        to`` of the third item is ``bad items[2].to`` (field ``items[2].to``, and an
        ``item`` field 2), any other refusal of it ``items[2].to: ...``; a refusal
        of no field is ``items[2]: ...``. A batch
        refused as a whole says which item."""
        at = f"{where}[{n}]"
        inner = self.fields.get("field")
        said = self.message
        if isinstance(inner, str) and inner != "input":
            named = f"{at}.{inner}"
            for head, now in ((f"bad {inner}", f"bad {named}"),
                              (f"unknown field {inner!r}", f"unknown field {named!r}")):  # fmt: skip
                if said.startswith(head) and said[len(head) : len(head) + 1] in ("", " ", ":", "."):
                    said = now + said[len(head) :]
                    break
            else:
                said = f"{named}: {said}"
            self.fields = {**self.fields, "field": named, "item": n}
        else:
            said = f"{at}: {said}"
            self.fields = {**self.fields, "item": n}
        self.message = said
        self.args = (said,)
        return self


# --- caller mistakes (exit 2) -------------------------------------------------
class InvalidInput(BrokerError, code="invalid_input", exit_code=2):
    """Input that fails validation; nothing was written. The message is in the
    broker's words: pydantic's phrases are reworded (``broker.wording``)."""

    def __init__(self, message: str, **fields: Any) -> None:
        from broker import wording

        if wording.needs_words(message):
            message = wording.in_words(message)
        super().__init__(message, **fields)


class BodyTooLarge(InvalidInput, code="body_too_large"): ...


class AmbiguousId(InvalidInput, code="ambiguous_id"):
    def __init__(self, prefix: str, candidates: list[str]) -> None:
        super().__init__(
            f"run id {prefix!r} is ambiguous: matches {', '.join(candidates)}",
            prefix=prefix,
            candidates=candidates,
        )


# --- not found (exit 3) -------------------------------------------------------
class NotFound(BrokerError, code="not_found", exit_code=3): ...


class SpaceNotFound(NotFound, code="space_not_found"): ...


class ParticipantNotFound(NotFound, code="unknown_participant"): ...


class StoreNotFound(NotFound, code="store_not_found"):
    """No broker database where the URL points (a command that only reads
    never creates one)."""


class MessageNotFound(NotFound, code="message_not_found"): ...


class DirectiveNotFound(NotFound, code="directive_not_found"):
    """``board.retract`` of an id that is not a directive of the space."""


# --- identity and authority (exit 4) ------------------------------------------
class AuthError(BrokerError, code="auth_failed", exit_code=4):
    """Missing, wrong or someone else's token."""


# S10: the one text of every refused participant token, whether it was missing,
# wrong, another participant's or replaced by a re-join: which of these it was
# would tell a prober (or a usurper) something, so the text never says.
TOKEN_REFUSED = (
    "token refused: it is missing, wrong, not this participant's, or no longer its "
    "current one; use the token its join printed (--token, BROKER_TOKEN, or "
    "'Authorization: Bearer <token>' over HTTP)"
)


def token_refused() -> AuthError:
    """``auth_failed`` with ``TOKEN_REFUSED`` (S10)."""
    return AuthError(TOKEN_REFUSED)


class Forbidden(BrokerError, code="forbidden", exit_code=4):
    """The caller is known but may not do this."""


class ToolUnavailable(Forbidden, code="tool_unavailable"):
    """A tool call without the grant; a ``tool_unavailable`` notice is left."""


class NotAuthor(Forbidden, code="not_author"):
    """Only a directive's author may retract it (S9)."""


# --- state conflicts (exit 5) -------------------------------------------------
class Conflict(BrokerError, code="conflict", exit_code=5): ...


class SpaceNotRunning(Conflict, code="space_not_running"): ...


class ParticipantLeft(Conflict, code="participant_left"): ...


class LeaseLost(Conflict, code="lease_lost"):
    """The lease token is stale: it expired and the deliveries moved on."""


class ClaimHeld(Conflict, code="claim_held"):
    """A board key is held by someone else."""


class AlreadyRetracted(Conflict, code="already_retracted"):
    """The directive was already lifted."""


# --- delivery outcomes (exit 1 / 6) -------------------------------------------
class NotDelivered(BrokerError, code="not_delivered", exit_code=1):
    """The message was logged but reached nobody (S8)."""


class MessagingFull(BrokerError, code="messaging_full", exit_code=6):
    """The log passed ``log_max_mb`` (S11)."""


class HoldsFull(BrokerError, code="holds_full", exit_code=6):
    """A participant or its space holds all the live key claims and path
    reservations its limits allow (``holds_cap``, ``space_holds_cap``, S41):
    release one, or wait for one to expire."""


class HandlerFailed(BrokerError, code="handler_failed", exit_code=7):
    """A teammate's handler (or its command) failed on a turn (S26)."""


# --- storage (exit 10+) -------------------------------------------------------
class StoreError(BrokerError, code="store_error", exit_code=10): ...


class StoreBusy(StoreError, code="store_busy", exit_code=11):
    """The database stayed locked past ``busy_timeout``."""


class WriterTaken(StoreBusy):
    """A write that was asked not to wait (``Store.write_now``) found the
    writer lock taken: raised before it began, so nothing ran. A server's
    group committer answers it by handing the write to its writer thread,
    so it reaches no caller."""


class TooManyConnections(StoreBusy, code="too_many_connections"):
    """PostgreSQL refused a new connection: the server (or the database, or
    the role) is at its connection limit (S41). Retry later, or make room:
    ``max_connections``, fewer processes, or smaller pools."""


class Exhausted(BrokerError, code="exhausted", exit_code=11):
    """A bounded resource is at its bound (S41): nothing was done; retry after
    ``retry_after`` seconds. Never a hang, never a crash."""

    def __init__(self, message: str, retry_after: int = 1, **fields: Any) -> None:
        super().__init__(message, retry_after=retry_after, **fields)


class TooManyWaits(Exhausted, code="too_many_waits"):
    """A participant, or its space, already has as many waits parked in the
    server as it may (HTTP 429)."""


class ServerBusy(Exhausted, code="server_busy"):
    """The server as a whole is at its budget (file descriptors): it keeps the
    rest for the operator and its own files (HTTP 503)."""


class ServerUnreachable(StoreError, code="server_unreachable"):
    """Client mode: the broker server at BROKER_URL did not answer."""


class UnsupportedSQLite(StoreError, code="unsupported_sqlite", exit_code=12): ...


class SchemaOutOfDate(StoreError, code="schema_out_of_date", exit_code=13):
    """The store's schema is behind this broker: ``broker db upgrade`` brings it up."""


class StoreTooNew(StoreError, code="store_too_new", exit_code=14):
    """The store's schema was written by a newer broker: this one cannot use it,
    and ``db upgrade`` cannot help (it knows no revision past its own head);
    upgrading broker itself does."""


class FileError(StoreError, code="file_error"):
    """Export or import files could not be read or written: permission denied,
    a read-only file system, a full disk, an I/O error."""


class AppendOnly(StoreError, code="append_only"):
    """An UPDATE or DELETE on an append-only table (the log, the journals)."""
