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
from broker.vocab import (
    ARCHETYPES,
    BOARD_READ_DEFAULT,
    BOARD_READ_MAX,
    MESSAGE_KINDS,
    MIN_SECONDS,
    SEARCH_DEFAULT,
    SEARCH_MAX,
    SEARCH_SYNTAX,
    SETTING_BOUNDS,
    SPACE_KINDS,
    SPACE_STATES,
)

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


def _body(help: str = "The message body.", *, blank: bool = False) -> Any:  # noqa: A002
    return fields.Body(help, high=BODY_MAX, blank=blank, empty="message text is empty")


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


def _an_id(help: str, noun: str, metavar: str, *, default: Any = fields.REQUIRED) -> Any:  # noqa: A002
    """An id the broker made (``broker.ids``: 26 letters and digits) of a message, a turn."""
    return fields.text(
        help,
        default=default,
        high=26,
        pattern=r"[0-9A-Za-z]{26}",
        words=f"a {noun} id (26 letters and digits)",
        metavar=metavar,
    )


def _reply_to() -> Any:
    said = "The id of the message this answers: the reply joins its thread (S35)."
    return _an_id(said, "message", "ID", default=None)


def _importance() -> Any:
    return fields.choice(
        "low, normal or high: shown to the recipients (urgent is the operator's).",
        ("low", "normal", "high"),
        default="normal",
    )


def _ack_required() -> Any:
    return fields.flag("Ask later who has seen it (the status of the message).")


def _space(tool: str | None = None) -> Any:
    return fields.text(
        "The space: its run id, the id without its prefix, or a unique prefix of either.",
        high=200,
        strip=True,
        metavar="RUN_ID",
        tool=tool,
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


SEND_MANY_MAX = 1000  # messages one batch may carry


class SendManyInput(Input):
    """``msg.send_many``: many messages in one transaction, each a ``msg.send``'s input."""

    items: list[SendInput] = fields.items(
        "The messages, each with the fields of msg.send ('to', 'text', 'idempotency_key', "
        "'thread', ...). All are sent in one transaction, or none if any is refused.",
        SendInput,
        high=SEND_MANY_MAX,
    )


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


def _lease_token() -> Any:
    return fields.text("The lease token the claim returned.", high=100, metavar="TOKEN")


def _ids(help: str = "Message ids of the lease (omitted: the whole lease).") -> Any:  # noqa: A002
    item = fields.Text("a message id", high=100)
    return fields.texts(help, item, default=None, high=CLAIM_MAX, one=True, metavar="ID")


def _lease(help: str = "Seconds the lease lasts (default: the space's lease_seconds).") -> Any:  # noqa: A002
    return fields.seconds(help, default=None, low=MIN_SECONDS, high=WEEK_S)


def _error() -> Any:
    return fields.text(
        "Why: kept as evidence on the delivery.", default=None, low=0, high=EVIDENCE_MAX,
        metavar="TEXT",
    )  # fmt: skip


class AckInput(Input):
    """``inbox.ack``: claimed messages are done (S14)."""

    lease_token: str = _lease_token()
    ids: list[str] | None = _ids()


class ReleaseInput(Input):
    """``inbox.release``: claimed messages go back to the inbox for replay (S14)."""

    lease_token: str = _lease_token()
    ids: list[str] | None = _ids()
    error: str | None = _error()


class ExtendInput(Input):
    """``inbox.extend``: a lease (or some of its messages) lasts longer."""

    lease_token: str = _lease_token()
    seconds: float | None = _lease("The new length, from now (default: the space's lease_seconds).")
    ids: list[str] | None = _ids()


class QuarantineInput(Input):
    """``inbox.quarantine``: a bad message is set aside with its evidence (S15)."""

    lease_token: str = _lease_token()
    message_id: str = fields.text("The id of the message to set aside.", high=100, metavar="ID")
    reason: str = fields.text(
        "Why the message is set aside.",
        high=EVIDENCE_MAX,
        blank=False,
        empty="a quarantine needs a reason",
        metavar="TEXT",
    )
    error: str | None = _error()


class AckAndClaimInput(Input):
    """``inbox.ack_and_claim``: ack and claim the next, in one transaction."""

    lease_token: str = _lease_token()
    ids: list[str] | None = _ids()
    limit: int = fields.whole(
        f"At most this many messages (1 to {CLAIM_MAX}).", default=1, high=CLAIM_MAX, metavar="N"
    )
    lease: float | None = _lease()


class NextTurnInput(Input):
    """``inbox.next``: what to show the model before its next call (S17)."""

    wait: float = fields.seconds(
        "Seconds to wait for something new (0: answer at once; woken at once when mail arrives).",
        default=0.0,
        low=0.0,
        high=DAY_S,
    )
    lease: float | None = _lease(
        "Seconds before an unconfirmed turn is shown again (default: the space's lease_seconds)."
    )
    limit: int | None = fields.whole(
        f"At most this many inbox messages in the turn (1 to {CLAIM_MAX}; default: all).",
        default=None,
        high=CLAIM_MAX,
        metavar="N",
    )


class SeenInput(Input):
    """``inbox.seen``: a turn the model has read (S18)."""

    turn_id: str = fields.text("The turn's id (from the next turn).", high=100, metavar="TURN")


# --- the board: key claims (S22) and path reservations (S37) --------------------------------
FENCE_HELP = "The fencing token the claim (or the reservation) returned: its 'fence'."


def _board_key() -> Any:  # the board's own check words a bad key (broker.board.claims)
    return fields.text(
        "The key: 1-200 letters, digits and . _ : / - (no '..'), e.g. 'src/app.py'.",
        low=0,
        high=4096,
        metavar="KEY",
    )


def _fence() -> Any:  # the board says what a fence below 1 is
    return fields.whole(FENCE_HELP, low=0, metavar="N")


def _ttl(help: str = "Seconds it lasts (at least 0.001, at most 86400; default 300).") -> Any:  # noqa: A002
    return fields.seconds(help, default=300.0, low=MIN_SECONDS, high=DAY_S)


def _paths(help: str, high: int) -> Any:  # noqa: A002
    item = fields.Text("a path or a pattern", high=4096)  # globs.PATH_MAX
    return fields.texts(help, item, low=1, high=high, one=True, metavar="PATH")


class KeyClaimInput(Input):
    """``board.claim``: an exclusive lease on a board key, with a fencing token."""

    key: str = _board_key()
    ttl: float = _ttl()
    wait: float = fields.seconds(
        "Seconds to wait for a key someone else holds (0: answer at once, claim_held naming "
        "the holder; woken the moment it is released, or when its claim runs out).",
        default=0.0,
        low=0.0,
        high=DAY_S,
    )


class KeyReleaseInput(Input):
    """``board.release``: free a key held with its fence."""

    key: str = _board_key()
    fence: int = _fence()


class KeyRenewInput(Input):
    """``board.renew``: a live claim lasts ``ttl`` seconds from now (same fence)."""

    key: str = _board_key()
    fence: int = _fence()
    ttl: float = _ttl("The new length, from now (at least 0.001, at most 86400; default 300).")


class ReserveInput(Input):
    """``board.reserve``: path patterns, one grant each, all or none (S37)."""

    patterns: list[str] = _paths(
        "Path patterns relative to the repository, e.g. 'src/parser/**': '*', '?' and '[a-z]' "
        "inside one segment, '**' any number of segments.",
        100,
    )
    shared: bool = fields.flag("Shared: other shared holders may overlap (e.g. reading).")
    ttl: float = _ttl()
    reason: str | None = fields.text(
        "Why (shown to whoever runs into it).", default=None, low=0, high=500, metavar="TEXT"
    )


class UnreserveInput(Input):
    """``board.unreserve``: release a path reservation by its fence."""

    fence: int = _fence()


class RenewReservationInput(Input):
    """``board.renew_reservation``: a live reservation lasts ``ttl`` seconds from now."""

    fence: int = _fence()
    ttl: float = _ttl("The new length, from now (at least 0.001, at most 86400; default 300).")


class CheckPathsInput(Input):
    """``board.check``: who holds what covers each path (S37)."""

    paths: list[str] = _paths("File paths relative to the repository, e.g. 'src/app.py'.", 10_000)


class RetractInput(Input):
    """``board.retract``: lift a directive the caller issued."""

    directive_id: str = fields.text(  # the board words an empty one (broker.board.posts)
        "The id of your directive (from the directive or the board).",
        low=0,
        high=200,
        metavar="ID",
    )


class PostInput(Input):
    """``board.post``: a channel post, or addressed to some participants too."""

    text: str = _body("The post.")
    addressed_to: list[str] = fields.texts(
        "Optional recipients (the forms of msg_send's 'to'): the post also lands in their "
        "inboxes; none: a channel post.",
        fields.Text("an address or a to form", high=400, strip=True),
        default=(),
        high=64,
        one=True,
        metavar="ADDR",
    )
    idempotency_key: str | None = _key()


class DirectiveInput(Input):
    """``board.directive``: a standing instruction for the participants it addresses."""

    to: list[str] = _recipients()
    # White space alone is the board's to word ("a directive needs text", broker.board.posts).
    text: str = _body("The directive.", blank=True)
    idempotency_key: str | None = _key()


def _board_after() -> Any:  # the board's read and the operator's view
    return fields.text(
        "Only entries after this message id (the last one you read).", default=None, metavar="ID"
    )


def _board_limit() -> Any:
    return fields.whole(
        f"At most this many entries (1 to {BOARD_READ_MAX}).",
        default=BOARD_READ_DEFAULT,
        high=BOARD_READ_MAX,
        metavar="N",
    )


class BoardReadInput(Input):
    """``board.read``: posts, directives and retractions after a cursor."""

    after: str | None = _board_after()
    limit: int = _board_limit()


# --- search (S36) ---------------------------------------------------------------------------
class SearchInput(Input):
    """``msg.search``: what the calling agent sent or received, best match first."""

    # the query language's own check (broker.mail.search) words every refusal of it
    query: str = fields.text(f"The words to find: {SEARCH_SYNTAX}.", low=0, high=BODY_MAX)
    sender: str | None = fields.text(
        "Optional: only messages this address sent.",
        default=None,
        high=400,
        strip=True,
        metavar="ADDR",
        wire="from",
        tool="written_by",  # a filter, not a sender: no tool lists a from (S10)
    )
    to: str | None = fields.text(
        "Optional: only messages addressed to, or that reached, this address.",
        default=None,
        high=400,
        strip=True,
        metavar="ADDR",
    )
    kinds: list[str] | None = fields.texts(
        "Optional: only these kinds (direct, broadcast, post, operator, ...).",
        fields.Text("a message kind", high=16),
        default=None,
        high=8,
        one=True,
        metavar="KINDS",  # the CLI's --kind also takes them comma-separated (direct,post)
        wire="kind",
        tool="kinds",
    )
    since: str | None = fields.text(
        "Optional: only messages logged at or after this UTC time (2026-11-30T03:52:00.000000Z).",
        default=None,
        high=40,
        metavar="WHEN",
    )
    limit: int = fields.whole(
        f"At most this many results, best first (1-{SEARCH_MAX}).",
        default=SEARCH_DEFAULT,
        high=SEARCH_MAX,
        metavar="N",
    )


LOG_PAGE = 1000  # log rows one read of messages.list answers without limit or tail


class MessagesInput(Input):
    """``messages.list``: a page of one space's log, in sequence order, filtered.
    One cursor (a message id or a seq) and one count (the first N or the last N)."""

    ONE_OF = (("after", "after_seq"), ("limit", "tail"))
    space: str = _space(tool="run")  # the MCP tool's argument since before it was declared
    after: str | None = fields.text(
        "Only messages after this message id (not with after_seq).",
        default=None,
        metavar="ID",
    )
    after_seq: int | None = fields.whole(
        "Only messages after this sequence number (not with after); pass back the last "
        "message's seq to read the next page.",
        default=None,
        low=0,
        metavar="SEQ",
    )
    kinds: list[str] | None = fields.texts(
        "Only these kinds: " + ", ".join(MESSAGE_KINDS) + " (one or a list).",
        fields.Text(
            "a message kind",
            high=16,
            pattern="|".join(MESSAGE_KINDS),
            words="one of " + ", ".join(MESSAGE_KINDS),
        ),
        default=None,
        high=len(MESSAGE_KINDS),
        one=True,
        metavar="KIND",
        wire="kind",
    )
    sender: str | None = fields.text(
        "Only messages from this exact sender address.",
        default=None,
        high=400,
        metavar="ADDR",
        tool="written_by",  # a filter, not a sender: no tool lists a sender (S10)
    )
    to: str | None = fields.text(
        "Only messages addressed to, or that reached, this address.",
        default=None,
        high=400,
        metavar="ADDR",
    )
    since: str | None = fields.text(
        "Only messages logged at or after this time (ISO-8601, UTC or with an offset).",
        default=None,
        high=40,
        metavar="WHEN",
    )
    limit: int | None = fields.whole(
        f"At most this many, the first (1-10000; default {LOG_PAGE}, not with tail).",
        default=None,
        high=10_000,
        metavar="N",
    )
    tail: int | None = fields.whole(
        "Only the last N (not with limit).", default=None, high=1_000_000, metavar="N"
    )
    thread: str | None = fields.text(
        "Only the messages of this thread (S35).", default=None, high=64, metavar="NAME"
    )


class OperatorSearchInput(SearchInput):
    """``messages.search``: one whole space's log (S36)."""

    space: str = _space()


# --- the participant itself ------------------------------------------------------------------
class NoInput(Input):
    """An operation that takes nothing (its caller is all it needs): any field is
    refused (S10)."""


class SetStatusInput(Input):
    """``participant.status``: the caller's own status (S5, S26)."""

    status: str = fields.choice(
        "running, idle, failed or shutdown (the teammates runtime sets it).",
        ("running", "idle", "failed", "shutdown"),
    )


# --- a message's status, the contact policy (S38) -------------------------------------------
class MessageStatusInput(Input):
    """``msg.status``: who has seen a message the caller sent."""

    message_id: str = fields.text("The id the send returned.", high=200, metavar="ID")


class SetPolicyInput(Input):
    """``contact.set``: who may message the caller directly (S38)."""

    policy: str = fields.text(  # the contact policy's own check words a bad one
        "open, parent-and-lead, listed (with 'allow') or closed.", high=32, metavar="POLICY"
    )
    allow: list[str] = fields.texts(
        "The addresses a 'listed' policy lets through.",
        fields.Text("an address", high=400),
        default=(),
        high=256,
        metavar="ADDR",
    )


# --- joining: someone holding the join key, not yet an agent (S27) -------------------------
def _secret(help: str) -> Any:  # noqa: A002
    return fields.text(help, default=None, high=400, secret=True, metavar="SECRET")


def _directory(help: str, high: int = 200) -> Any:  # noqa: A002
    return fields.text(help, default=None, low=0, high=high, line=True, metavar="TEXT")


def _codename() -> Any:
    return fields.text(
        "The name to join as: the address below the space's root (S3).",
        high=400,
        strip=True,
        line=True,
        metavar="CODENAME",
    )


def _last_token() -> Any:
    return _secret(
        "Continue an address that has joined before (a retry, a restart): its last token."
    )


class JoinDirectory(Input):
    """What a join says of the joiner (S40): its directory fields (None keeps what
    a re-join's address stored, ``''`` clears one), whether it leads, whether it
    may send, and its grant. Every join's record declares these; no operation
    takes it alone."""

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


class JoinInput(JoinDirectory):
    """The library's join (``broker.spaces.participants.join``): the codename,
    the directory, and the process that holds the identity (``pid``: S27, prune
    may check it; None, live by its heartbeat). The credential is apart
    (``participants.Credential``)."""

    codename: str = _codename()
    pid: int | None = fields.whole(
        "The process that holds the identity (prune checks it on this host).",
        default=None,
        high=2**63 - 1,
        metavar="PID",
    )


class SpaceJoinInput(JoinDirectory):
    """``space.join``: join a space as a new participant with its join key (or
    a parent's token), or continue an address with its last token (S27, S40).
    The secrets are never shown back (``fields.Text.secret``)."""

    space: str = _space()
    codename: str = _codename()
    join_key: str | None = _secret("The space's join key (`space create` prints it).")
    parent_token: str | None = _secret(
        "Join as a child of the participant whose token this is (instead of a join key)."
    )
    token: str | None = _last_token()


class AdmitInput(JoinDirectory):
    """``participants.join``: the operator joins a participant on an agent's
    behalf (the operator key is the credential, S27). No ``pid``: a server cannot
    tell whose a client's process is, so the participant is live by its
    heartbeat. ``token`` continues an address while its holder is live (S40)."""

    space: str = _space()
    codename: str = _codename()
    token: str | None = _last_token()


# --- the teammate runtime's turn bookkeeping (S16, S26), served ---------------------------
def _turn_id() -> Any:
    return _an_id("The turn's id (from the turn).", "turn", "TURN_ID")


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


# --- spaces -------------------------------------------------------------------------------
_SETTING_HELP = {
    "body_max_bytes": "largest message body, UTF-8 bytes",
    "inbox_cap": "waiting deliveries per recipient, inbox_full past it",
    "broadcast_cap": "broadcasts a live participant may have unread, broadcast_full past it",
    "log_max_mb": "log size in MiB past which sends fail, messaging_full",
    "max_deliveries": "deliveries before quarantine (S15)",
    "lease_seconds": "default claim lease in seconds",
    "live_seconds": "how long a participant with no recorded process stays live after its last "
    "call (S27)",
    "sender_share": "the most one sender may hold of another's inbox_cap and of log_max_mb (S30)",
    "join_key_share": "the most the participants admitted by the join key may hold together of "
    "another's inbox_cap and of log_max_mb (S42)",
    "holds_cap": "live key claims and path reservations per participant (S41)",
    "space_holds_cap": "live key claims and path reservations in the space (S41)",
}


def _setting(name: str) -> Any:
    """One space setting (S30, S33): its bounds are ``vocab.SETTING_BOUNDS``'."""
    from broker.store.settings import Limits
    from broker.vocab import INT_SETTINGS, describe_setting, number

    low, high = SETTING_BOUNDS[name]
    said = (
        f"{_SETTING_HELP[name]} ({describe_setting(name)}; "
        f"default {number(getattr(Limits(), name))})"
    )
    if name in INT_SETTINGS:
        return fields.whole(said, default=None, low=int(low), high=int(high))
    return fields.number(said, default=None, low=low, high=high)


class SpaceSettings(Input):
    """A space's limits (S30, S33): every setting with its bounds, declared once.
    ``space create`` and ``space set`` take some of them by name (``fields.record``)."""

    body_max_bytes: int | None = _setting("body_max_bytes")
    inbox_cap: int | None = _setting("inbox_cap")
    broadcast_cap: int | None = _setting("broadcast_cap")
    log_max_mb: float | None = _setting("log_max_mb")
    max_deliveries: int | None = _setting("max_deliveries")
    lease_seconds: float | None = _setting("lease_seconds")
    live_seconds: float | None = _setting("live_seconds")
    sender_share: float | None = _setting("sender_share")
    join_key_share: float | None = _setting("join_key_share")
    holds_cap: int | None = _setting("holds_cap")
    space_holds_cap: int | None = _setting("space_holds_cap")


def _settings(help: str) -> Any:  # noqa: A002
    return fields.record(help, SpaceSettings, noun="space setting", default=None)


class CreateSpaceInput(Input):
    """``spaces.create``: a new space of a kind, with the limits it overrides."""

    kind: str = fields.choice(
        "What the space is for: run (a standalone run; pick it when unsure); agentiflow (a lead "
        "and its workers: the operator's messages go to the lead unless 'to' says otherwise); "
        "workflow (a run of steps: 'step:NAME' reaches the runs of a step); session (a chat "
        "session: it stays joined between turns).",
        SPACE_KINDS,
        default="run",
    )
    settings: dict[str, Any] | None = _settings(
        "Limits this space overrides, by name, e.g. inbox_cap=512 (the others keep their "
        "defaults; space show lists them with their bounds)."
    )


class SpacesInput(Input):
    """``spaces.list``: every space of the store."""

    state: str | None = fields.choice("Only spaces in this state.", SPACE_STATES, default=None)


class SpaceInput(Input):
    """An operator's operation on one space that takes nothing else."""

    space: str = _space()


class SetSpaceInput(Input):
    """``spaces.set``: change a space's limits (S30)."""

    space: str = _space()
    settings: dict[str, Any] | None = _settings(
        "The limits to change, by name, e.g. log_max_mb=128 sender_share=0.25."
    )


class SpaceUsageInput(Input):
    """``spaces.usage``: a space's limits in effect and their use (S30)."""

    space: str = _space()
    top: int = fields.whole("Senders listed by log share.", default=10, high=1000, metavar="N")


# --- participants, the queue, the board -----------------------------------------------------
class ParticipantsInput(Input):
    """``participants.list``: the directory of a space."""

    space: str = _space(tool="run")  # the MCP tool's argument since before it was declared
    include_left: bool = fields.flag("Also those that left.", default=True)


class ParticipantInput(Input):
    """``participants.show``: one participant by address."""

    space: str = _space()
    address: str = fields.text(
        "The participant's address (e.g. 'lynx' or 'flow/lynx').", high=400, metavar="ADDRESS"
    )


class OperatorRetractInput(Input):
    """``board.retract`` for the operator: lift any directive (S9's exception)."""

    space: str = _space()
    directive_id: str = fields.text("The directive's message id.", metavar="ID")


class BoardViewInput(Input):
    """``board.view``: posts, directives and retractions after a cursor."""

    space: str = _space()
    after: str | None = _board_after()
    limit: int = _board_limit()


class OperatorMessageStatusInput(Input):
    """``messages.status``: who has seen a message."""

    space: str = _space()
    message_id: str = fields.text("The message's id.", metavar="ID")


def _reason() -> Any:
    return fields.text(
        "Optional: why (journaled as 'operator: REASON').", default=None, low=0, high=500
    )


class OperatorKeyReleaseInput(Input):
    """``board.release`` for the operator: end a live key claim, whoever holds it (S22)."""

    space: str = _space()
    key: str = fields.text("The board key.", high=200, metavar="KEY")
    fence: int | None = fields.whole(
        "Optional: end it only if this is the current grant's fence.",
        default=None,
        high=2**62,
        metavar="N",
    )
    reason: str | None = _reason()


class OperatorUnreserveInput(Input):
    """``board.unreserve`` for the operator: end a live path reservation (S37)."""

    space: str = _space()
    fence: int = fields.whole("The reservation's fence.", high=2**62, metavar="N")
    reason: str | None = _reason()


class PruneInput(Input):
    """``participants.prune``: record stale participants as left (S25)."""

    space: str = _space()
    older_than: float | None = fields.seconds(
        "Also those whose last sign of life is older than this many seconds (0 to 10 years; "
        "not given: heartbeats are not looked at).",
        default=None,
        low=0.0,
        high=10 * 366 * DAY_S,
    )
    check_pid: bool = fields.flag(
        "Also those whose registered process is gone (on the broker's host).", default=True
    )
    dry_run: bool = fields.flag("Only list who would be pruned; change nothing.")


class ClaimJournalInput(Input):
    """``board.journal``: the claim journal of a space (S23)."""

    space: str = _space()
    key: str | None = fields.text(
        "Only this key ('path PATTERN' for a path reservation's lines).",
        default=None,
        high=4200,
        metavar="KEY",
    )


class OperatorCheckPathsInput(Input):
    """``board.check`` for the operator: who holds what covers each path (S37)."""

    space: str = _space()
    paths: list[str] = fields.texts(
        "Paths to check (relative, '/' separated). One path or a list.",
        fields.Text("a path", high=4096),
        low=1,
        high=10_000,
        one=True,
        metavar="PATH",
    )


class RequeueInput(Input):
    """``queue.requeue``: quarantined deliveries back to ready (S15)."""

    space: str = _space()
    ids: list[str] = fields.texts(
        "Message ids (every inbox it is quarantined in) or delivery ids (that one inbox).",
        fields.Text("an id", high=4000),  # the library says which id is too long, and none given
        high=10_000,
        one=True,
        metavar="ID",
    )
