"""What callers pass in: the input record of every declared operation.

Each record is declared once, field by field (type, bounds, default and help,
``broker.model.fields``), and is the one check of that operation's input on
every surface (S10, S33): the library's method, the HTTP route, the MCP tool,
the remote client and the CLI options all come from it (the operation table,
``broker.api.operations``). No record has a sender: who calls is the caller's
identity, never an input (S10).

Help texts are written once, for every reader: a person at the CLI, a model
reading an MCP tool's schema, the API reference.
"""

from __future__ import annotations

from typing import Any

from broker.model import fields
from broker.model.fields import Input
from broker.vocab import ARCHETYPES, MIN_SECONDS, SETTING_BOUNDS

BODY_MAX = int(SETTING_BOUNDS["body_max_bytes"][1])  # no body is longer than the largest cap
DAY_S = 86_400.0
WEEK_S = 7 * DAY_S
CLAIM_MAX = 10_000  # deliveries one claim may take
EVIDENCE_MAX = 8000  # a quarantine's reason (broker.delivery.inbox.EVIDENCE_MAX)

TO_FORMS = (
    "Recipients, each one of: an address (e.g. 'lynx'); 'role:NAME' (every live agent named "
    "NAME); 'step:NAME' (every live participant of workflow step NAME); 'parent' (who launched "
    "you); 'lead'; 'operator' (the human running the swarm: recorded in the log for them); "
    "'broadcast' (every other live participant). One name or a list."
)
IDEMPOTENCY = (
    "A key of your choice: repeating the call with the same key returns the first result "
    "instead of sending twice (use it when you retry)."
)


# --- fields more than one record declares (each record needs its own instance) ------------
def _recipients(help: str = TO_FORMS, *, default: Any = fields.REQUIRED) -> Any:  # noqa: A002
    address = fields.Text("an address or a to form", high=400, strip=True)
    return fields.texts(help, address, default=default, low=1, high=64, one=True, metavar="ADDR")


def _body(help: str = "The message body.") -> Any:  # noqa: A002
    return fields.Body(help, high=BODY_MAX, blank=False, empty="message text is empty")


def _key() -> Any:
    return fields.text(IDEMPOTENCY, default=None, metavar="KEY")


def _thread() -> Any:
    return fields.text(
        "A short thread name to group this message with others on the same subject (S35).",
        default=None,
        high=64,
        pattern=r"[\w.:#@/+-]{1,64}",
        words="a thread name: 1 to 64 letters, digits or _ . : # @ / + - (no spaces)",
        metavar="NAME",
    )


def _reply_to() -> Any:
    return fields.text(
        "The id of the message this answers: the reply joins its thread (S35).",
        default=None,
        high=26,
        pattern=r"[0-9A-Za-z]{26}",
        words="a message id (26 letters and digits)",
        metavar="ID",
    )


def _importance() -> Any:
    return fields.choice(
        "low, normal or high: shown to the recipients (urgent is the operator's).",
        ("low", "normal", "high"),
        default="normal",
    )


def _ack_required() -> Any:
    return fields.flag("Ask later who has seen it (the status of the message).")


def _space() -> Any:
    return fields.text(
        "The space: its run id, the id without its prefix, or a unique prefix of either.",
        high=200,
        strip=True,
        metavar="RUN_ID",
    )


# --- messages -------------------------------------------------------------------------------
class SendInput(Input):
    """``msg.send``: a message from the calling participant."""

    to: list[str] = _recipients()
    text: str = _body()
    idempotency_key: str | None = _key()
    thread: str | None = _thread()
    reply_to: str | None = _reply_to()
    importance: str = _importance()
    ack_required: bool = _ack_required()


class OperatorSendInput(Input):
    """``messages.send``: a message from the operator (S9)."""

    space: str = _space()
    text: str = _body()
    to: list[str] | None = _recipients(
        TO_FORMS + " Not given: the lead of an agentiflow, everyone (broadcast) elsewhere.",
        default=None,
    )
    urgent: bool = fields.flag("Shown first, marked URGENT, in every recipient's next turn (S17).")
    idempotency_key: str | None = _key()
    thread: str | None = _thread()
    reply_to: str | None = _reply_to()
    importance: str = _importance()
    ack_required: bool = _ack_required()


# --- the inbox queue --------------------------------------------------------------------------
class ClaimInput(Input):
    """``inbox.claim``: the oldest ready messages of the caller's inbox, under a lease."""

    limit: int = fields.whole(
        f"At most this many messages (1 to {CLAIM_MAX}).", default=1, high=CLAIM_MAX, metavar="N"
    )
    lease: float | None = fields.seconds(
        "Seconds the lease lasts (default: the space's lease_seconds).",
        default=None,
        low=MIN_SECONDS,
        high=WEEK_S,
    )
    wait: float = fields.seconds(
        "Seconds to wait for something to claim (0: answer at once; woken at once when mail "
        "arrives).",
        default=0.0,
        low=0.0,
        high=DAY_S,
    )
    owner: str | None = fields.text(
        "A name for who holds the lease, shown in the queue (default: address:pid).",
        default=None,
        line=True,
    )


# --- joining: someone holding the join key, not yet an agent (S27) -------------------------
def _secret(help: str) -> Any:  # noqa: A002
    return fields.text(help, default=None, high=400, secret=True, metavar="SECRET")


def _directory(help: str, high: int = 200) -> Any:  # noqa: A002
    return fields.text(help, default=None, low=0, high=high, line=True, metavar="TEXT")


class SpaceJoinInput(Input):
    """``space.join``: join a space as a new participant with its join key (or
    a parent's token), or continue an address with its last token (S27, S40).
    The secrets are never shown back (``fields.Text.secret``)."""

    space: str = _space()
    codename: str = fields.text(
        "The name to join as: the address below the space's root (S3).",
        high=400,
        strip=True,
        line=True,
        metavar="CODENAME",
    )
    join_key: str | None = _secret("The space's join key (`space create` prints it).")
    parent_token: str | None = _secret(
        "Join as a child of the participant whose token this is (instead of a join key)."
    )
    token: str | None = _secret(
        "Continue an address that has joined before (a retry, a restart): its last token."
    )
    agent: str | None = fields.text(
        "Agent name (role:NAME reaches it).", default=None, line=True, metavar="NAME"
    )
    run_id: str | None = fields.text(
        "Its own run id (default: the codename).", default=None, line=True, metavar="ID"
    )
    step: str | None = _directory("Workflow step (step:NAME reaches it); '' clears it.")
    parent: str | None = _directory("Address of the run that launched this one; '' clears it.")
    role: str | None = _directory("Directory: short role description; '' clears it.")
    archetype: str | None = fields.choice(
        "Directory: the kind of agent ('' clears it).",
        (*ARCHETYPES, ""),
        default=None,
    )
    task: str | None = _directory("Directory: one-line task; '' clears it.", high=2000)
    lead: bool = fields.flag("Join as the lead (address 'lead').")
    messaging: bool = fields.flag("Off: receive-only (inherited by children).", default=True)
    tools: list[str] | None = fields.texts(
        "Grant only these tools (board.directive and board.retract only by name).",
        fields.Text("a tool name", high=100, line=True),
        default=None,
        metavar="NAME",
    )


# --- the teammate runtime's turn bookkeeping (S16, S26), served ---------------------------
def _turn_id() -> Any:
    return fields.text(
        "The turn's id (from the turn).",
        high=26,
        pattern=r"[0-9A-Za-z]{26}",
        words="a turn id (26 letters and digits)",
        metavar="TURN_ID",
    )


class TurnInput(Input):
    """``history.append`` / ``history.undo``: one of the caller's turns."""

    turn_id: str = _turn_id()


class TurnQuarantineInput(Input):
    """``turn.quarantine``: a failed turn's inbox messages set aside (S15, S26)."""

    turn_id: str = _turn_id()
    reason: str = fields.text(
        "Why: kept with the messages as evidence.", high=EVIDENCE_MAX, blank=False,
        empty="a quarantine needs a reason",
    )  # fmt: skip


# --- the operator's input records (below: agents' records stay above this line) ----------
