"""``Operator``: the human running the swarm (the public API; ``broker.api.handles``
re-exports it)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker.api.agent import Agent
from broker.api.declaration import Operation, declared, operation
from broker.api.mail import OperatorMail
from broker.api.operations import (
    ACTIVITY,
    ADMIT,
    ARCHIVE_SPACE,
    BOARD_VIEW,
    CLAIM_JOURNAL,
    CLAIMS,
    CREATE_SPACE,
    GET_SPACE,
    MESSAGES,
    OPERATOR_CHECK_PATHS,
    OPERATOR_MESSAGE_STATUS,
    OPERATOR_RELEASE_KEY,
    OPERATOR_RETRACT,
    OPERATOR_SEND,
    PARTICIPANT,
    PARTICIPANTS,
    PRUNE,
    QUARANTINED,
    QUEUE_STATS,
    RELEASE_RESERVATION,
    REQUEUE,
    RESERVATIONS,
    ROTATE_JOIN_KEY,
    SET_SPACE,
    SPACE_USAGE,
    SPACES,
    STOP_SPACE,
    THREADS,
    TRANSCRIPT,
)
from broker.api.operator_ops import read_log
from broker.api.reservations import OperatorPaths
from broker.model.fields import Input
from broker.model.records import (
    AckStatus,
    BackupResult,
    BoardEntry,
    ClaimGrant,
    CreatedSpace,
    Finding,
    Joined,
    JoinKey,
    JournalEntry,
    LogEntry,
    Participant,
    PathCheck,
    QuarantinedDelivery,
    QueueStats,
    Reservation,
    SendResult,
    Space,
    SpaceActivity,
    SpaceUsage,
    Thread,
    TurnRecord,
    VacuumResult,
    log_matches,
)
from broker.model.typecheck import checked, self_checked, utc_time
from broker.store.sqlite import Store as Store
from broker.store.sqlite import Tx
from broker.vocab import BOARD_READ_DEFAULT, SpaceKind, SpaceState, Via

if TYPE_CHECKING:  # the export, import and purge methods (annotations only)
    import threading

    from broker.interchange.export import ExportSummary, Progress
    from broker.interchange.importer import ImportSummary
    from broker.interchange.migrate_store import StoreCopy
    from broker.model.records import Purged


@checked
class Operator(OperatorPaths, OperatorMail):
    """The human running the swarm. ``via`` names the surface (S9).

    Constructing one proves the caller is the operator (S29): ``key`` is the
    operator key; None takes BROKER_OPERATOR_KEY, else the key file beside the
    database (the operator's own shell notices nothing). A key that is not the
    store's is ``auth_failed``."""

    def __init__(self, store: Store, key: str | None = None, via: Via = "cli") -> None:
        from broker.store import keys

        secret = keys.presented(store, key)
        with store.read() as t:
            keys.verify_operator(t, secret)
        self.store = store
        self.via: Via = via
        self._key = secret

    @property
    def key(self) -> str:
        """The operator key this handle proved (``broker key show``): what
        ``BROKER_OPERATOR_KEY`` takes on a host without the key file."""
        return self._key

    @declared(CREATE_SPACE)
    def create_space(
        self, /, kind: SpaceKind = "run", *, tx: Tx | None = None, **settings: Any
    ) -> CreatedSpace:
        """A new running space, with its join key (shown this once, S27); ``settings``
        are the limits it overrides (S30), each checked against its bounds (S33)."""
        return self.call(CREATE_SPACE, CREATE_SPACE.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(ROTATE_JOIN_KEY)
    def rotate_join_key(self, space: str, *, tx: Tx | None = None) -> JoinKey:
        """A new join key for ``space`` (made before join keys, or its key lost or
        leaked): the old one stops working; joined participants keep their tokens."""
        return self.call(ROTATE_JOIN_KEY, ROTATE_JOIN_KEY.take(locals()), tx)  # type: ignore[no-any-return]

    def join(self, space: str, codename: str, **fields: Any) -> tuple[Agent, Joined]:
        """Join ``codename`` on an agent's behalf with the operator key (the
        teammates runtime, ``agent run``, the demo and the server do); see
        ``Agent.join``. The operator key continues an address that has joined
        before (S40) once its holder is gone; ``token=`` (its last token)
        continues it while it is live. No process is recorded unless ``pid``
        is given (this process or one of its ancestors, S27): the participant
        is live by its heartbeat, not by this process."""
        if fields.get("pid") is None:  # the declared join (participants.join) records none
            fields.pop("pid", None)
            joined = self.call(ADMIT, {"space": space, "codename": codename, **fields})
            return Agent.connect(self.store, joined.space_id, joined.address, joined.token), joined
        return Agent.join(self.store, space, codename, operator_key=self._key, **fields)

    @declared(ADMIT)
    def admit(
        self,
        space: str,
        codename: str,
        *,
        agent: str | None = None,
        run_id: str | None = None,
        step: str | None = None,
        parent: str | None = None,
        role: str | None = None,
        archetype: str | None = None,
        task: str | None = None,
        lead: bool = False,
        messaging: bool = True,
        tools: list[str] | None = None,
        token: str | None = None,
        tx: Tx | None = None,
    ) -> Joined:
        """``participants.join``: join ``codename`` on an agent's behalf, the
        operator key its credential, recording no process (what ``join`` does
        with ``pid=None``, as the HTTP API serves it); the address and its new
        token, shown once. ``token`` continues a live address (S40)."""
        return self.call(ADMIT, ADMIT.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(OPERATOR_SEND)
    def send(
        self,
        space: str,
        text: str,
        *,
        to: str | Iterable[str] | None = None,
        urgent: bool = False,
        idempotency_key: str | None = None,
        thread: str | None = None,
        reply_to: str | None = None,
        importance: str = "normal",
        ack_required: bool = False,
        tx: Tx | None = None,
    ) -> SendResult:
        """An operator message (S9): to ``to`` (default: an agentiflow's lead,
        else broadcast), ``urgent`` shown first. ``reply_to``, ``thread``,
        ``importance`` and ``ack_required`` as in ``Agent.send`` (S35)."""
        return self.call(OPERATOR_SEND, OPERATOR_SEND.take(locals()), tx)  # type: ignore[no-any-return]

    @self_checked
    def call(self, op: Operation, inp: Input | Mapping[str, Any], tx: Tx | None = None) -> Any:
        """Run the declared operation ``op`` as the operator: ``inp`` is its checked
        input record (or its fields by name, checked here). Every surface's way
        in: the record goes down to the library function whole, with this
        handle's ``via`` where it takes one (S9)."""
        op = operation(op)
        inp = op.accept("operator", inp)
        extra = {name: getattr(self, name) for name in op.context}
        return op.fn(self.store, inp, tx=tx, **extra)

    def log(
        self,
        space: str,
        *,
        after: str | int | None = None,
        kinds: Iterable[str] | None = None,
        sender: str | None = None,
        to: str | None = None,
        since: str | None = None,
        limit: int | None = None,
        tail: int | None = None,
        thread: str | None = None,
    ) -> list[LogEntry]:
        """The log of ``space`` in sequence order, filtered.

        ``after`` is a message id or a seq; ``sender`` an exact sender address;
        ``to`` keeps entries whose ``to`` forms name it or that reached it;
        ``since`` an ISO-8601 time, UTC or with an offset (``created_at_utc >= since``); ``limit``
        keeps the first N, ``tail`` the last N (not both)."""
        # The cursor, the kinds and the thread are read by index; the other
        # filters run in Python over those rows (the operator's read of a log
        # it browses, not a hot path).
        if limit is not None and tail is not None:
            from broker import errors

            raise errors.InvalidInput("limit and tail exclude each other", field="tail")
        for name, n in (("limit", limit), ("tail", tail)):
            if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
                from broker import errors

                raise errors.InvalidInput(f"bad {name} {n!r}: a whole number from 1", field=name)
        by_id, by_seq = _cursor(after)
        return read_log(
            self.store,
            space,
            after=by_id,
            after_seq=by_seq,
            kinds=kinds,
            sender=sender,
            to=to,
            since=_since(since),
            limit=limit,
            tail=tail,
            thread=thread,
        )

    @declared(MESSAGES)
    def messages(
        self,
        space: str,
        *,
        after: str | None = None,
        after_seq: int | None = None,
        kinds: str | Iterable[str] | None = None,
        sender: str | None = None,
        to: str | None = None,
        since: str | None = None,
        limit: int | None = None,
        tail: int | None = None,
        thread: str | None = None,
        tx: Tx | None = None,
    ) -> list[LogEntry]:
        """``messages.list``: one page of the log of ``space`` (``log`` reads it
        all): after one cursor (a message id, or a seq), filtered as ``log``, the
        first ``limit`` (default 1000) or the last ``tail``."""
        return self.call(MESSAGES, MESSAGES.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(PARTICIPANTS)
    def participants(
        self, space: str, *, include_left: bool = True, tx: Tx | None = None
    ) -> list[Participant]:
        """The participants of ``space`` (its directory), in join order."""
        return self.call(PARTICIPANTS, PARTICIPANTS.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(QUARANTINED)
    def quarantined(self, space: str, *, tx: Tx | None = None) -> list[QuarantinedDelivery]:
        """Quarantined deliveries of a space, with their evidence."""
        return self.call(QUARANTINED, QUARANTINED.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(REQUEUE)
    def requeue(self, space: str, ids: str | Iterable[str], *, tx: Tx | None = None) -> int:
        """Put quarantined deliveries (delivery or message ids) back to ready."""
        return REQUEUE.answer(self.call(REQUEUE, REQUEUE.take(locals()), tx))  # type: ignore[no-any-return]

    @declared(TRANSCRIPT)
    def transcript(self, space: str, address: str, *, tx: Tx | None = None) -> list[TurnRecord]:
        """A participant's transcript rebuilt turn by turn."""
        return self.call(TRANSCRIPT, TRANSCRIPT.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(THREADS)
    def threads(self, space: str, *, tx: Tx | None = None) -> list[Thread]:
        """The threads of ``space``, most recently active first (S35)."""
        return self.call(THREADS, THREADS.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(OPERATOR_MESSAGE_STATUS)
    def status(self, space: str, message_id: str, *, tx: Tx | None = None) -> AckStatus:
        """Who among those a message reached has seen it (their ``seen`` receipts)."""
        return self.call(OPERATOR_MESSAGE_STATUS, OPERATOR_MESSAGE_STATUS.take(locals()), tx)  # type: ignore[no-any-return]

    # --- operations (broker doctor / backup / vacuum) --------------------------------
    @classmethod
    def doctor(cls, store: Store | str | None = None) -> list[Finding]:
        """Check a store and say how to fix what is wrong: one ``Finding`` per check
        (``broker.store.maintenance.exit_code`` turns them into the command's exit status).

        A class method that needs no operator key: it reads file modes, pragmas
        and counts, never message content, so it can diagnose a store whose key
        file is missing (that is one of its findings). ``store`` is an open
        ``Store``, or a URL (None: the default store) that it opens read-only,
        creating nothing; a missing or unreadable store is a finding too."""
        from broker.store import maintenance

        return maintenance.doctor(store)

    def backup(
        self,
        path: str | Path,
        *,
        force: bool = False,
        progress: Callable[[int, int], None] | None = None,
    ) -> BackupResult:
        """Copy the store online (writers go on) to ``path``: one read snapshot,
        integrity-checked before it replaces anything, the operator key file
        copied beside it. ``force`` overwrites an existing file;
        ``progress(done, total)`` follows the pages copied."""
        from broker.store import maintenance

        return maintenance.backup(self.store, path, force=force, progress=progress)

    def vacuum(self) -> VacuumResult:
        """Fold the WAL back and rewrite the database without its free pages,
        under the writer lock (other writers wait, readers go on); the sizes
        before and after."""
        from broker.store import maintenance

        return maintenance.vacuum(self.store)

    # --- following, spaces, the board and claims, export and import, purge, migration -------
    def follow(
        self,
        space: str,
        *,
        after: str | int | None = None,
        kinds: Iterable[str] | None = None,
        sender: str | None = None,
        to: str | None = None,
        since: str | None = None,
        idle_timeout: float | None = None,
    ) -> Iterator[list[LogEntry]]:
        """Batches of new log entries after ``after`` (filtered as ``log``),
        as they commit, until the space stops (or ``idle_timeout`` seconds of quiet)."""
        from broker.delivery.follow import follow_log

        by_id, by_seq = _cursor(after)
        since = _since(since)
        for batch in follow_log(
            self.store,
            space,
            after=by_id,
            after_seq=by_seq,
            kinds=list(kinds or ()),
            idle_timeout=idle_timeout,
        ):
            kept = [e for e in batch if log_matches(e, sender, to, since)]
            if kept:
                yield kept

    @declared(SPACES)
    def spaces(self, *, state: SpaceState | None = None, tx: Tx | None = None) -> list[Space]:
        """Every space of the store, oldest first (optionally in one state)."""
        return self.call(SPACES, SPACES.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(GET_SPACE)
    def get_space(self, space: str, *, tx: Tx | None = None) -> Space:
        """One space by run id (full, compact or a unique prefix, S1)."""
        return self.call(GET_SPACE, GET_SPACE.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(SET_SPACE)
    def set_space(self, /, space: str, *, tx: Tx | None = None, **settings: Any) -> SpaceUsage:
        """Change a space's limits (S30): each setting checked against its bounds
        (S33, ``invalid_input`` naming it), merged over the space's own, the
        change logged; returns the limits in effect and their use."""
        return self.call(SET_SPACE, SET_SPACE.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(SPACE_USAGE)
    def space_usage(self, space: str, *, top: int = 10, tx: Tx | None = None) -> SpaceUsage:
        """The limits in effect in ``space`` and their use (S30): log bytes against
        ``log_max_mb``, the ``top`` senders by log share, each inbox against
        ``inbox_cap``."""
        return self.call(SPACE_USAGE, SPACE_USAGE.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(STOP_SPACE)
    def stop_space(self, space: str, *, tx: Tx | None = None) -> Space:
        """Stop a space: it takes no more messages; its participants are recorded as left."""
        return self.call(STOP_SPACE, STOP_SPACE.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(ARCHIVE_SPACE)
    def archive_space(self, space: str, *, tx: Tx | None = None) -> Space:
        """Archive a space: stopped for good, its history kept."""
        return self.call(ARCHIVE_SPACE, ARCHIVE_SPACE.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(PARTICIPANT)
    def participant(self, space: str, address: str, *, tx: Tx | None = None) -> Participant:
        """One participant (its directory entry) by address."""
        return self.call(PARTICIPANT, PARTICIPANT.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(PRUNE)
    def prune(
        self,
        space: str,
        *,
        older_than: float | None = None,
        check_pid: bool = True,
        dry_run: bool = False,
        tx: Tx | None = None,
    ) -> list[Participant]:
        """Record stale participants as left (S25): heartbeat older than
        ``older_than`` seconds, or (``check_pid``) a registered process that is
        gone. ``dry_run`` returns who would be pruned and writes nothing."""
        return self.call(PRUNE, PRUNE.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(BOARD_VIEW)
    def board(
        self,
        space: str,
        *,
        after: str | None = None,
        limit: int = BOARD_READ_DEFAULT,
        tx: Tx | None = None,
    ) -> list[BoardEntry]:
        """The operator's ``board.view``: posts, directives and retractions after
        the cursor ``after`` (a message id), oldest first, at most ``limit``."""
        return self.call(BOARD_VIEW, BOARD_VIEW.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(OPERATOR_RETRACT)
    def retract(self, space: str, directive_id: str, *, tx: Tx | None = None) -> SendResult:
        """Lift any directive of ``space``, whoever issued it (S9: the operator is
        the one exception to "only its author"): a ``retract`` row from
        ``operator``; lifted already: ``AlreadyRetracted``."""
        return self.call(OPERATOR_RETRACT, OPERATOR_RETRACT.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(CLAIMS)
    def claims(self, space: str, *, tx: Tx | None = None) -> list[ClaimGrant]:
        """The live board claims of a space (held and not expired), by key."""
        return self.call(CLAIMS, CLAIMS.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(OPERATOR_RELEASE_KEY)
    def release_key(
        self,
        space: str,
        key: str,
        *,
        fence: int | None = None,
        reason: str | None = None,
        tx: Tx | None = None,
    ) -> JournalEntry:
        """End the live claim on ``key``, whoever holds it (S22): journaled
        ``released`` with the reason ``operator: <reason>``; the holder's fence
        goes stale (``lease_lost``). With ``fence``, only that grant is ended.
        Nobody holds it (or ``fence`` is not the current grant): ``LeaseLost``."""
        return self.call(OPERATOR_RELEASE_KEY, OPERATOR_RELEASE_KEY.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(RELEASE_RESERVATION)
    def release_reservation(
        self, space: str, fence: int, *, reason: str | None = None, tx: Tx | None = None
    ) -> JournalEntry:
        """End the live reservation with ``fence``, whoever holds it (S37):
        journaled ``released`` with the reason ``operator: <reason>``; the fence
        goes stale (``lease_lost``). Not live: ``LeaseLost``."""
        return self.call(RELEASE_RESERVATION, RELEASE_RESERVATION.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(CLAIM_JOURNAL)
    def claim_journal(
        self, space: str, *, key: str | None = None, tx: Tx | None = None
    ) -> list[JournalEntry]:
        """The claim journal of a space (optionally one key), oldest first; path
        reservations' lines have the key ``path <pattern>`` (S37)."""
        return self.call(CLAIM_JOURNAL, CLAIM_JOURNAL.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(OPERATOR_CHECK_PATHS)
    def check_paths(
        self, space: str, paths: str | Iterable[str], *, tx: Tx | None = None
    ) -> list[PathCheck]:
        """Who holds what covers each path; ``blocked`` when anyone holds a
        covering pattern exclusively (S37)."""
        return self.call(OPERATOR_CHECK_PATHS, OPERATOR_CHECK_PATHS.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(RESERVATIONS)
    def reservations(self, space: str, *, tx: Tx | None = None) -> list[Reservation]:
        """The live path reservations of a space, by fence."""
        return self.call(RESERVATIONS, RESERVATIONS.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(ACTIVITY)
    def activity(self, space: str, *, tx: Tx | None = None) -> SpaceActivity:
        """Each inbox of ``space`` as a queue (waiting, in flight, retried,
        quarantined) and the send rate of the last minute, in one reading."""
        return self.call(ACTIVITY, ACTIVITY.take(locals()), tx)  # type: ignore[no-any-return]

    @declared(QUEUE_STATS)
    def queue_stats(self, space: str, *, tx: Tx | None = None) -> QueueStats:
        """A space's deliveries by state and the redeliveries they took (S13-S15)."""
        return self.call(QUEUE_STATS, QUEUE_STATS.take(locals()), tx)  # type: ignore[no-any-return]

    # --- files: export, import and retention (docs/export.md) ------------------------
    # Restoring rows from files and deleting a space are operator actions (S29):
    # these are the library surface for `broker export`, `import` and `space purge`.
    def export_space(
        self,
        space: str,
        root: str | os.PathLike[str],
        *,
        follow: bool = False,
        stop: threading.Event | None = None,
        on_ready: Callable[[ExportSummary], None] | None = None,
        progress: Progress | None = None,
    ) -> ExportSummary:
        """Write the space in the JSONL layout under ``root`` (spec §Export layout).

        ``follow``: then append what commits until the space stops or ``stop`` is
        set; ``on_ready`` gets the summary once the snapshot is written. An
        ``OSError`` is one line: ``invalid_input`` for a bad path, ``file_error``
        for a file system that refuses."""
        from broker.interchange.export import export_space, follow_space

        if follow:
            return follow_space(
                self.store, space, root, stop=stop, progress=progress, on_ready=on_ready
            )
        return export_space(self.store, space, root, progress=progress)

    def export_mailbox(
        self, space: str, root: str | os.PathLike[str], *, progress: Progress | None = None
    ) -> ExportSummary:
        """Write the space as a Mailbox Protocol tree under ``root/mail/`` (spec
        §Mailbox layout)."""
        from broker.interchange.export import export_mailbox

        return export_mailbox(self.store, space, root, progress=progress)

    def import_dir(
        self,
        path: str | os.PathLike[str],
        *,
        layout: str = "auto",
        skip_bad: bool = False,
        kind: str = "run",
        progress: Progress | None = None,
    ) -> ImportSummary:
        """Import an exported space layout or a mail tree, all in one transaction.

        Every field of every line is checked (S33); each bad line is reported as
        ``FILE:LINE`` and nothing is written (``import_failed``) unless
        ``skip_bad``. A mail file claiming to be from the operator is refused (S29)."""
        from broker.interchange.importer import import_dir

        return import_dir(
            self.store, path, layout=layout, skip_bad=skip_bad, kind=kind, progress=progress
        )

    def purge_space(
        self,
        space: str,
        export_dir: str | os.PathLike[str],
        *,
        progress: Progress | None = None,
    ) -> Purged:
        """Retention: export an archived space to ``export_dir`` (JSONL layout),
        verify the files against the database, then delete the space's rows in
        one transaction, journaled in ``purges``. The only way rows leave the
        store; a running or stopped space is refused (``conflict``)."""
        from broker.interchange.purge import purge_space

        return purge_space(self.store, space, export_dir, via=self.via, progress=progress)

    def migrate_store(self, to: str) -> StoreCopy:
        """Copy every space into the store at URL ``to`` (SQLite <-> PostgreSQL)
        through the JSONL layout, in one import transaction, then check the
        target's export is byte-identical to the source's (``identical``).
        Join keys, participants' tokens and (into a store holding no space yet)
        this operator key are carried across: nothing is issued again."""
        from broker.interchange.migrate_store import migrate_store

        return migrate_store(self.store, to, self._key)


def _cursor(after: str | int | None) -> tuple[str | None, int | None]:
    """A log cursor as (message id, seq): ``after`` is one or the other."""
    if after is None:
        return None, None
    if isinstance(after, bool) or (isinstance(after, int) and not 0 <= after < 2**63):
        from broker import errors

        raise errors.InvalidInput(f"bad cursor {after!r}: a message id or a seq", field="after")
    return (None, after) if isinstance(after, int) else (after, None)


def _since(since: str | None) -> str | None:
    """A ``since`` filter as the store writes times (a time that is none is refused)."""
    return None if since is None else utc_time(since)
