"""The library functions of the operator's declared operations
(``broker.api.operations``): each takes the store, the operation's checked
input record whole and the caller's transaction (``fn(store, input, *, tx)``,
with the handle's ``via`` by keyword where the operation names it), and hands
the record's fields to the library function that does the work.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from broker.model.records import Count
from broker.spaces import spaces

if TYPE_CHECKING:
    from broker.model import inputs
    from broker.model.records import (
        AckStatus,
        BoardEntry,
        ClaimGrant,
        CreatedSpace,
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
    )
    from broker.store.sqlite import Store, Tx


# --- the log ------------------------------------------------------------------------------
def messages(store: Store, inp: inputs.MessagesInput, *, tx: Tx | None = None) -> list[LogEntry]:
    """``messages.list``: a page of the log (``LOG_PAGE`` rows without limit or tail)."""
    from broker.model.inputs import LOG_PAGE
    from broker.model.typecheck import utc_time

    limit = inp.limit if inp.limit is not None or inp.tail is not None else LOG_PAGE
    return read_log(
        store,
        inp.space,
        after=inp.after,
        after_seq=inp.after_seq,
        kinds=inp.kinds,
        sender=inp.sender,
        to=inp.to,
        since=None if inp.since is None else utc_time(inp.since),
        limit=limit,
        tail=inp.tail,
        thread=inp.thread,
    )


def read_log(
    store: Store,
    space: str,
    *,
    after: str | None,
    after_seq: int | None,
    kinds: Iterable[str] | None,
    sender: str | None,
    to: str | None,
    since: str | None,
    limit: int | None,
    tail: int | None,
    thread: str | None,
) -> list[LogEntry]:
    """The log of ``space`` in sequence order after one cursor (an id or a seq),
    filtered; the first ``limit`` or the last ``tail`` (None: all). ``since`` is
    in the store's form of a time."""
    # The cursor, the kinds and the thread are read by index; the other
    # filters run in Python over those rows (the operator's read of a log
    # it browses, not a hot path).
    from broker.mail import messages as mail
    from broker.model.records import log_matches

    if thread is not None:  # one indexed range of the log (S35), then the same filters
        from broker.mail import threads

        kind_set = set(kinds or ())
        start = after_seq or 0
        if after is not None:  # seqs are gap-free: the row after it is seq + 1
            nxt = mail.log(store, space, after=after, limit=1)
            start = max(start, nxt[0].seq - 1 if nxt else 2**63 - 1)
        entries = [
            e
            for e in threads.log(store, space, thread)
            if e.seq > start and (not kind_set or e.kind in kind_set)
        ]
    else:
        entries = mail.log(store, space, after=after, after_seq=after_seq, kinds=kinds)
    entries = [e for e in entries if log_matches(e, sender, to, since)]
    if tail is not None:
        return entries[-tail:]
    return entries[:limit] if limit is not None else entries


# --- participants ---------------------------------------------------------------------------
def admit(store: Store, inp: inputs.AdmitInput, *, tx: Tx | None = None, key: str) -> Joined:
    """``participants.join``: the operator key (the calling handle's) is the
    credential, the address's last token continues a live one; no process."""
    from broker.api.joiner import joining
    from broker.spaces import participants

    credential = participants.Credential(operator_key=key, token=inp.token)
    return participants.join(store, inp.space, joining(inp), credential=credential, tx=tx)


# --- spaces -------------------------------------------------------------------------------
def create_space(
    store: Store, inp: inputs.CreateSpaceInput, *, tx: Tx | None = None
) -> CreatedSpace:
    return spaces.create(store, inp.kind, settings=inp.settings or {}, tx=tx)


def list_spaces(store: Store, inp: inputs.SpacesInput, *, tx: Tx | None = None) -> list[Space]:
    return spaces.list_spaces(store, state=inp.state, tx=tx)


def get_space(store: Store, inp: inputs.SpaceInput, *, tx: Tx | None = None) -> Space:
    return spaces.get(store, inp.space, tx=tx)


def set_space(
    store: Store, inp: inputs.SetSpaceInput, *, via: str, tx: Tx | None = None
) -> SpaceUsage:
    from broker.spaces import usage

    return usage.set_space(store, inp.space, inp.settings or {}, via=via, tx=tx)


def space_usage(store: Store, inp: inputs.SpaceUsageInput, *, tx: Tx | None = None) -> SpaceUsage:
    from broker.spaces import usage

    return usage.space_usage(store, inp.space, top=inp.top, tx=tx)


def stop_space(store: Store, inp: inputs.SpaceInput, *, tx: Tx | None = None) -> Space:
    return spaces.stop(store, inp.space, tx=tx)


def archive_space(store: Store, inp: inputs.SpaceInput, *, tx: Tx | None = None) -> Space:
    return spaces.archive(store, inp.space, tx=tx)


def rotate_join_key(store: Store, inp: inputs.SpaceInput, *, tx: Tx | None = None) -> JoinKey:
    return spaces.rotate_join_key(store, inp.space, tx=tx)


# --- participants ---------------------------------------------------------------------------
def participants(
    store: Store, inp: inputs.ParticipantsInput, *, tx: Tx | None = None
) -> list[Participant]:
    from broker.spaces import participants

    return participants.list_participants(store, inp.space, include_left=inp.include_left, tx=tx)


def participant(store: Store, inp: inputs.ParticipantInput, *, tx: Tx | None = None) -> Participant:
    from broker.spaces import participants

    return participants.get(store, inp.space, inp.address, tx=tx)


# --- the queue ------------------------------------------------------------------------------
def quarantined(
    store: Store, inp: inputs.SpaceInput, *, tx: Tx | None = None
) -> list[QuarantinedDelivery]:
    from broker.delivery import inbox_view

    return inbox_view.quarantined(store, inp.space, tx=tx)


def queue_stats(store: Store, inp: inputs.SpaceInput, *, tx: Tx | None = None) -> QueueStats:
    from broker.delivery import inbox_view

    return inbox_view.stats(store, inp.space, tx=tx)


def activity(store: Store, inp: inputs.SpaceInput, *, tx: Tx | None = None) -> SpaceActivity:
    from broker.delivery import inbox_view

    return inbox_view.activity(store, inp.space, tx=tx)


# --- the board ------------------------------------------------------------------------------
def claims(store: Store, inp: inputs.SpaceInput, *, tx: Tx | None = None) -> list[ClaimGrant]:
    from broker.board import claims

    return claims.live(store, inp.space, tx=tx)


def retract(
    store: Store, inp: inputs.OperatorRetractInput, *, via: str, tx: Tx | None = None
) -> SendResult:
    from broker.board import posts

    return posts.retract_as_operator(store, inp.space, inp.directive_id, via=via, tx=tx)  # type: ignore[arg-type]


def board_view(
    store: Store, inp: inputs.BoardViewInput, *, tx: Tx | None = None
) -> list[BoardEntry]:
    from broker.board import posts

    return posts.view(store, inp.space, after=inp.after, limit=inp.limit, tx=tx)


# --- messages and transcripts ---------------------------------------------------------------
def transcript(
    store: Store, inp: inputs.ParticipantInput, *, tx: Tx | None = None
) -> list[TurnRecord]:
    from broker.delivery import transcript

    return transcript.rebuild(store, inp.space, inp.address, tx=tx)


def threads(store: Store, inp: inputs.SpaceInput, *, tx: Tx | None = None) -> list[Thread]:
    from broker.mail import threads

    return threads.threads(store, inp.space, tx=tx)


def message_status(
    store: Store, inp: inputs.OperatorMessageStatusInput, *, tx: Tx | None = None
) -> AckStatus:
    from broker.mail import acks

    return acks.operator_status(store, inp.space, inp.message_id, tx=tx)


def release_key(
    store: Store, inp: inputs.OperatorKeyReleaseInput, *, tx: Tx | None = None
) -> JournalEntry:
    from broker.board import claims

    return claims.release_as_operator(
        store, inp.space, inp.key, fence=inp.fence, reason=inp.reason, tx=tx
    )


def release_reservation(
    store: Store, inp: inputs.OperatorUnreserveInput, *, tx: Tx | None = None
) -> JournalEntry:
    from broker.board import reservations

    return reservations.release_as_operator(store, inp.space, inp.fence, reason=inp.reason, tx=tx)


def reservations(
    store: Store, inp: inputs.SpaceInput, *, tx: Tx | None = None
) -> list[Reservation]:
    from broker.board import reservations

    return reservations.live(store, inp.space, tx=tx)


def claim_journal(
    store: Store, inp: inputs.ClaimJournalInput, *, tx: Tx | None = None
) -> list[JournalEntry]:
    """Expired holds journaled first (each in its own write when ``tx`` is None)."""
    from broker.board import claims, reservations

    reservations.expire(store, inp.space, tx=tx)
    return claims.journal(store, inp.space, key=inp.key, tx=tx)


def prune(store: Store, inp: inputs.PruneInput, *, tx: Tx | None = None) -> list[Participant]:
    from broker.spaces import directory

    return directory.prune(
        store,
        inp.space,
        older_than=inp.older_than,
        check_pid=inp.check_pid,
        dry_run=inp.dry_run,
        tx=tx,
    )


def check_paths(
    store: Store, inp: inputs.OperatorCheckPathsInput, *, tx: Tx | None = None
) -> list[PathCheck]:
    from broker.board import reservations

    return reservations.check_as_operator(store, inp.space, inp.paths, tx=tx)


def requeue(store: Store, inp: inputs.RequeueInput, *, tx: Tx | None = None) -> Count:
    from broker.delivery import inbox

    return Count(inbox.requeue(store, inp.space, inp.ids, tx=tx))
