"""SQL views for inspection: the one place their SQL and documentation live.

Anyone with ``sqlite3`` (or ``psql``) can answer questions about a swarm from
these views without knowing how the tables fit together: who has unread mail,
which messages reached nobody and why, who held a board key and when. They are
created by the alembic migration ``0002_views`` (which imports ``create_ddl``
from here); ``docs/schema.md`` documents them from ``VIEWS`` below, so the
SQL, the columns and their descriptions cannot drift apart. A later change to
a view is a new migration that calls ``drop_ddl`` then ``create_ddl``.

Every view keeps ``space_id`` as its first column: filter on it, a database
holds many spaces. Views never expose ``token_hash`` or lease tokens.

The SQL is portable (SQLite and PostgreSQL) except two fragments that
``select_sql`` fills in per dialect: the current time as a sortable ISO text,
and expanding a JSON list into rows.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.store.sql import fragment


@dataclass(frozen=True, slots=True)
class View:
    name: str
    doc: str
    columns: tuple[tuple[str, str], ...]  # (column, description), in SELECT order
    sql: str  # the SELECT, with {now} and {nr_*} (not_reached as rows) placeholders


# How a log row's outcome is named: in the ``v_log`` view and in ``log.jsonl``.
OUTCOME_SQL = (
    "CASE WHEN {m}.kind = 'seen' THEN 'receipt' "
    "WHEN {m}.reached_n > 0 AND {m}.not_reached = '[]' THEN 'delivered' "
    "WHEN {m}.reached_n > 0 THEN 'partial' "
    "WHEN {m}.not_reached <> '[]' THEN 'reached_nobody' "
    "ELSE 'logged' END"
)
OUTCOMES = {
    "delivered": "reached every recipient it resolved to",
    "partial": "reached some; `not_reached` says who not and why",
    "reached_nobody": "reached nobody (S8); `not_reached` says why",
    "logged": "had no recipient to reach (a channel post, a retraction)",
    "receipt": "a `seen` receipt written after a turn (S18)",
}


def outcome_sql(alias: str = "m") -> str:
    return OUTCOME_SQL.format(m=alias)


_NR = {
    "sqlite": (
        "spaces sp JOIN messages m ON m.space_no = sp.rowid, json_each(m.not_reached) j",
        "json_extract(j.value, '$.address')",
        "json_extract(j.value, '$.reason')",
    ),
    "postgresql": (
        "spaces sp JOIN messages m ON m.space_no = sp.rowid, "
        "jsonb_array_elements(m.not_reached::jsonb) j",
        "j.value ->> 'address'",
        "j.value ->> 'reason'",
    ),
}
_NOW = {
    # Same fixed-width text as broker.ids.fmt_ts (microseconds), so it compares as time.
    "sqlite": "(strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000Z')",
    "postgresql": "to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')",
}

# A JSON list of the senders of a thread, in order of their first message.
_SENDERS = {
    "sqlite": "json_group_array(w.sender)",  # the subquery is ordered; 3.40 has no ORDER BY here
    # Compact JSON like SQLite's (json_agg's text has a space after each comma).
    "postgresql": "'[' || coalesce(string_agg(to_json(w.sender)::text, ',' ORDER BY w.first), '') || ']'",
}
# An inbox's depth: on SQLite the counter plus the deliveries past its fold
# position, still ready or processing (revision 0015 batches the counter).
_WAITING = {
    "sqlite": "p.waiting + (SELECT count(*) FROM deliveries w WHERE w.rowid > "
    "coalesce((SELECT upto FROM folds WHERE name = 'waiting'), 0) "
    "AND w.recipient_no = p.rowid AND w.state IN ('ready', 'processing')) AS waiting",
    "postgresql": "p.waiting",
}

VIEWS: tuple[View, ...] = (
    View(
        "v_log",
        "The log with each row's outcome, in `seq` order per space: every message and receipt.",
        (
            ("space_id", "the space"),
            ("seq", "gap-free sequence number in the space"),
            ("id", "message id (ULID)"),
            ("created_at_utc", "when it was logged"),
            ("kind", "direct | broadcast | post | directive | retract | operator | seen"),
            ("sender", "sender address, or `operator`"),
            ("recipients", "JSON list of the `to` forms as given"),
            ("body", "the text (a receipt: JSON list of the message ids seen)"),
            ("urgent", "1 for an urgent operator message"),
            ("via", "operator surface: cli | cp | mcp"),
            ("ref", "retract: the directive; seen: the turn"),
            ("reached", "JSON list of the addresses reached"),
            ("not_reached", "JSON list of {address, reason} it did not reach"),
            ("reached_n", "how many it reached"),
            ("bcast_no", "position in the broadcast log, if it was added"),
            ("outcome", "delivered | partial | reached_nobody | logged | receipt"),
        ),
        "SELECT sp.id AS space_id, m.seq, m.id, m.created_at_utc, m.kind, m.sender, "
        "m.recipients, m.body, m.urgent, m.via, m.ref, {reached_m} AS reached, m.not_reached, "
        "m.reached_n, "
        f"m.bcast_no, {outcome_sql('m')} AS outcome "
        "FROM messages m JOIN spaces sp ON sp.rowid = m.space_no",
    ),
    View(
        "v_not_reached",
        "One row per (message, address it did not reach) with the reason (S7, S8).",
        (
            ("space_id", "the space"),
            ("seq", "the message's sequence number"),
            ("message_id", "the message"),
            ("created_at_utc", "when it was logged"),
            ("kind", "message kind"),
            ("sender", "who sent it"),
            ("address", "the address or `to` form not reached"),
            (
                "reason",
                "unknown_participant | no_live_participant | no_parent | no_lead | "
                "participant_left | inbox_full | broadcast_full | sender_share | contact_policy",
            ),
            ("reached_n", "how many it did reach (0: it reached nobody)"),
        ),
        "SELECT sp.id AS space_id, m.seq, m.id AS message_id, m.created_at_utc, m.kind, "
        "m.sender, {nr_address} AS address, {nr_reason} AS reason, m.reached_n FROM {nr_from}",
    ),
    View(
        "v_inbox",
        "Every delivery (one message in one inbox) with its queue state and lease (S13-S16).",
        (
            ("space_id", "the space"),
            ("recipient", "address of the inbox's owner"),
            ("recipient_id", "participant id of the owner"),
            ("delivery_id", "the delivery"),
            ("message_id", "the message (consumers de-duplicate by it)"),
            ("seq", "the message's log sequence number"),
            ("kind", "message kind"),
            ("sender", "who sent it"),
            ("urgent", "1 for an urgent operator message"),
            ("body", "the text"),
            ("state", "ready | processing | done | quarantine"),
            ("attempts", "times it was claimed"),
            ("created_at_utc", "FIFO key, with delivery_id"),
            (
                "lease_owner",
                "who holds the lease (processing); on any other state the owner of its last "
                "lease, kept as evidence (S15), NULL after a requeue: nobody holds it (lease_live 0)",
            ),
            ("lease_expires_at", "when the lease runs out"),
            ("lease_live", "1 while processing under a lease that has not expired"),
            ("acked_at_utc", "when it was acked (done)"),
            ("last_error", "the last failure reported"),
            ("quarantine_reason", "why it was quarantined"),
        ),
        # A delivery's message, space and time are its rowid's (revision 0021); its
        # recipient is a participant's number (revision 0022), the log's space a
        # space's (revision 0023).
        "SELECT sp.id AS space_id, p.address AS recipient, "
        "p.id AS recipient_id, {delivery_id} AS delivery_id, m.id AS message_id, m.seq, m.kind, "
        "m.sender, "
        "m.urgent, m.body, d.state, d.attempts, "
        "coalesce(d.created_at_utc, m.created_at_utc) AS created_at_utc, d.lease_owner, "
        "d.lease_expires_at, CASE WHEN d.state = 'processing' AND d.lease_expires_at > {now} "
        "THEN 1 ELSE 0 END AS lease_live, d.acked_at_utc, d.last_error, d.quarantine_reason "
        "FROM deliveries d JOIN messages m ON m.rowid = d.rowid >> 20 "
        "JOIN spaces sp ON sp.rowid = m.space_no JOIN participants p ON p.rowid = d.recipient_no",
    ),
    View(
        "v_inboxes",
        "One row per participant: its inbox by state, its lease, its unread broadcasts.",
        (
            ("space_id", "the space"),
            ("address", "the participant"),
            ("status", "running | idle | failed | shutdown | left"),
            ("ready", "deliveries waiting to be claimed"),
            ("processing", "deliveries claimed, not yet acked"),
            ("done", "deliveries acked"),
            ("quarantine", "deliveries quarantined"),
            ("unread_broadcasts", "broadcasts after its cursor, not its own"),
            ("unread", "ready + unread_broadcasts: what its next turn would show"),
            ("oldest_ready_at", "created_at_utc of the oldest ready delivery"),
            ("lease_owner", "owner of the latest-expiring lease on its processing deliveries"),
            ("lease_expires_at", "latest expiry among those leases"),
            ("bcast_seen", "broadcast cursor"),
        ),
        "SELECT x.space_id, x.address, x.status, x.ready, x.processing, x.done, x.quarantine, "
        "x.unread_broadcasts, x.ready + x.unread_broadcasts AS unread, x.oldest_ready_at, "
        "x.lease_owner, x.lease_expires_at, x.bcast_seen FROM ("
        "SELECT p.space_id, p.address, p.status, "
        "COALESCE(c.ready, 0) AS ready, COALESCE(c.processing, 0) AS processing, "
        "COALESCE(c.done, 0) AS done, COALESCE(c.quarantine, 0) AS quarantine, "
        "(SELECT COUNT(*) FROM messages b WHERE b.space_no = "
        "(SELECT sp.rowid FROM spaces sp WHERE sp.id = p.space_id) AND b.bcast_no IS NOT NULL "
        "AND b.bcast_no > p.bcast_seen AND b.sender <> p.address) AS unread_broadcasts, "
        "c.oldest_ready_at, "
        "(SELECT l.lease_owner FROM deliveries l WHERE l.recipient_no = p.rowid "
        "AND l.state = 'processing' ORDER BY l.lease_expires_at DESC LIMIT 1) AS lease_owner, "
        "c.lease_expires_at, p.bcast_seen FROM participants p LEFT JOIN (SELECT d.recipient_no, "
        "SUM(CASE WHEN d.state = 'ready' THEN 1 ELSE 0 END) AS ready, "
        "SUM(CASE WHEN d.state = 'processing' THEN 1 ELSE 0 END) AS processing, "
        "SUM(CASE WHEN d.state = 'done' THEN 1 ELSE 0 END) AS done, "
        "SUM(CASE WHEN d.state = 'quarantine' THEN 1 ELSE 0 END) AS quarantine, "
        "MIN(CASE WHEN d.state = 'ready' THEN coalesce(d.created_at_utc, m.created_at_utc) END) "
        "AS oldest_ready_at, "
        "MAX(CASE WHEN d.state = 'processing' THEN d.lease_expires_at END) AS lease_expires_at "
        "FROM deliveries d JOIN messages m ON m.rowid = d.rowid >> 20 GROUP BY d.recipient_no) "
        "c ON c.recipient_no = p.rowid) x",
    ),
    View(
        "v_participants",
        "Participants with their status and directory entry (S2-S5, S25); never the token.",
        (
            ("space_id", "the space"),
            ("id", "participant id"),
            ("address", "how others reach it"),
            ("codename", "full codename of the latest join"),
            ("agent", "agent name (`role:NAME` matches it)"),
            ("run_id", "its own run id"),
            ("step", "workflow step"),
            ("parent", "address of the run that launched it"),
            ("role", "directory: role"),
            ("archetype", "directory: archetype"),
            ("task", "directory: task"),
            ("is_lead", "1 for an agentiflow's lead"),
            ("messaging", "0 = receive-only"),
            ("status", "running | idle | failed | shutdown | left"),
            ("live", "1 while running or idle (reachable by roles, steps, broadcast)"),
            ("waiting", "deliveries ready or processing (inbox cap: 256)"),
            ("bcast_seen", "broadcast cursor"),
            ("joined_at_utc", "latest join"),
            ("left_at_utc", "when it left"),
            ("last_seen_utc", "heartbeat"),
            ("left_reason", "why it left last (leave, prune, space stopped...)"),
        ),
        "SELECT p.space_id, p.id, p.address, p.codename, p.agent, p.run_id, p.step, p.parent, "
        "p.role, p.archetype, p.task, p.is_lead, p.messaging, p.status, "
        "CASE WHEN p.status IN ('running', 'idle') THEN 1 ELSE 0 END AS live, "
        "{waiting}, p.bcast_seen, p.joined_at_utc, p.left_at_utc, p.last_seen_utc, "
        "CASE WHEN p.status = 'left' THEN (SELECT e.reason FROM participant_events e "
        "WHERE e.participant_id = p.id AND e.event = 'left' ORDER BY e.at_utc DESC, e.id DESC "
        "LIMIT 1) END AS left_reason "
        "FROM participants p",
    ),
    View(
        "v_live_claims",
        "Board keys held right now: a holder and a lease that has not expired (S22).",
        (
            ("space_id", "the space"),
            ("key", "the board key"),
            ("holder", "address holding it"),
            ("token", "fencing token of the grant"),
            ("claimed_at_utc", "when it was granted"),
            ("lease_expires_at", "when the lease runs out unless renewed"),
        ),
        "SELECT c.space_id, c.key, c.holder, c.token, c.claimed_at_utc, c.lease_expires_at "
        "FROM board_claims c WHERE c.holder IS NOT NULL AND c.lease_expires_at > {now}",
    ),
    View(
        "v_claim_journal",
        "The claim journal (S23): claimed / renewed / released / expired, append-only.",
        (
            ("space_id", "the space"),
            ("at_utc", "when it happened"),
            ("key", "the board key"),
            ("event", "claimed | renewed | released | expired"),
            ("owner", "the address holding (or that held) the key"),
            ("token", "fencing token of the grant"),
            ("lease_expires_at", "lease expiry as of this event"),
            ("id", "journal row id"),
        ),
        "SELECT j.space_id, j.at_utc, j.key, j.event, j.owner, j.token, j.lease_expires_at, j.id "
        "FROM claim_journal j",
    ),
    View(
        "v_claim_holds",
        "Who held which key and when: one row per grant, from the journal.",
        (
            ("space_id", "the space"),
            ("key", "the board key"),
            ("owner", "who held it"),
            ("token", "fencing token of the grant"),
            ("held_from", "when it was claimed"),
            ("held_until", "when it was released or expired (NULL: still held or not yet expired)"),
            ("ended_by", "released | expired | NULL"),
            ("lease_expires_at", "latest lease expiry granted (claim or renewals)"),
        ),
        "SELECT c.space_id, c.key, c.owner, c.token, c.at_utc AS held_from, "
        "(SELECT e.at_utc FROM claim_journal e WHERE e.space_id = c.space_id AND e.key = c.key "
        "AND e.token = c.token AND e.event IN ('released', 'expired') "
        "ORDER BY e.at_utc, e.id LIMIT 1) AS held_until, "
        "(SELECT e.event FROM claim_journal e WHERE e.space_id = c.space_id AND e.key = c.key "
        "AND e.token = c.token AND e.event IN ('released', 'expired') "
        "ORDER BY e.at_utc, e.id LIMIT 1) AS ended_by, "
        "(SELECT MAX(e.lease_expires_at) FROM claim_journal e WHERE e.space_id = c.space_id "
        "AND e.key = c.key AND e.token = c.token AND e.event IN ('claimed', 'renewed')) "
        "AS lease_expires_at "
        "FROM claim_journal c WHERE c.event = 'claimed'",
    ),
    View(
        "v_quarantine",
        "Quarantined deliveries with their evidence (S15): never blocking, requeueable.",
        (
            ("space_id", "the space"),
            ("recipient", "whose inbox"),
            ("delivery_id", "the delivery"),
            ("message_id", "the message"),
            ("seq", "its log sequence number"),
            ("kind", "message kind"),
            ("sender", "who sent it"),
            ("body", "the text"),
            ("attempts", "times it was claimed"),
            ("quarantine_reason", "why it was quarantined"),
            ("last_error", "the last failure reported"),
            ("created_at_utc", "when it was delivered"),
        ),
        "SELECT sp.id AS space_id, p.address AS recipient, "
        "{delivery_id} AS delivery_id, m.id AS message_id, m.seq, m.kind, m.sender, m.body, "
        "d.attempts, d.quarantine_reason, d.last_error, "
        "coalesce(d.created_at_utc, m.created_at_utc) AS created_at_utc "
        "FROM deliveries d JOIN messages m ON m.rowid = d.rowid >> 20 "
        "JOIN spaces sp ON sp.rowid = m.space_no JOIN participants p ON p.rowid = d.recipient_no "
        "WHERE d.state = 'quarantine'",
    ),
    View(
        "v_directives",
        "Standing directives with the retraction that lifted each, if any (S9).",
        (
            ("space_id", "the space"),
            ("seq", "the directive's log sequence number"),
            ("id", "the directive's message id"),
            ("sender", "its author"),
            ("recipients", "JSON list of the `to` forms it applies to"),
            ("body", "the instruction"),
            ("created_at_utc", "when it was issued"),
            ("retracted_by", "message id of the retraction (NULL: in force)"),
            ("retracted_at", "when it was lifted"),
            ("in_force", "1 until retracted"),
        ),
        "SELECT sp.id AS space_id, m.seq, m.id, m.sender, m.recipients, m.body, "
        "m.created_at_utc, r.id AS retracted_by, r.created_at_utc AS retracted_at, "
        "CASE WHEN r.id IS NULL THEN 1 ELSE 0 END AS in_force "
        "FROM messages m JOIN spaces sp ON sp.rowid = m.space_no "
        "LEFT JOIN messages r ON r.kind = 'retract' AND r.ref = m.id "
        "AND r.space_no = m.space_no AND r.seq = (SELECT MIN(r2.seq) FROM messages r2 "
        "WHERE r2.kind = 'retract' AND r2.ref = m.id AND r2.space_no = m.space_no) "
        "WHERE m.kind = 'directive'",
    ),
    View(
        "v_threads",
        "One row per thread of a space (S35): its first and last message, who wrote in it, counts.",
        (
            ("space_id", "the space"),
            ("thread", "the thread's name"),
            ("messages", "how many messages it holds"),
            ("first_id", "its first message"),
            ("first_at", "when its first message was logged"),
            ("last_id", "its latest message"),
            ("last_at", "when its latest message was logged"),
            ("participants", "how many distinct senders wrote in it"),
            ("senders", "JSON list of those senders, in order of their first message"),
        ),
        "SELECT sp.id AS space_id, m.thread, COUNT(*) AS messages, "
        "(SELECT f.id FROM messages f WHERE f.space_no = m.space_no AND f.thread = m.thread "
        "ORDER BY f.seq LIMIT 1) AS first_id, MIN(m.created_at_utc) AS first_at, "
        "(SELECT l.id FROM messages l WHERE l.space_no = m.space_no AND l.thread = m.thread "
        "ORDER BY l.seq DESC LIMIT 1) AS last_id, MAX(m.created_at_utc) AS last_at, "
        "COUNT(DISTINCT m.sender) AS participants, "
        "(SELECT {senders} FROM (SELECT s.sender, MIN(s.seq) AS first FROM messages s "
        "WHERE s.space_no = m.space_no AND s.thread = m.thread GROUP BY s.sender ORDER BY first) w) "
        "AS senders FROM messages m JOIN spaces sp ON sp.rowid = m.space_no "
        "WHERE m.thread IS NOT NULL GROUP BY m.space_no, sp.id, m.thread",
    ),
)


def select_sql(view: View, dialect: str = "sqlite") -> str:
    """The view's SELECT for ``dialect``."""
    nr_from, nr_address, nr_reason = _NR[dialect]
    return view.sql.format(
        now=_NOW[dialect],
        nr_from=nr_from,
        nr_address=nr_address,
        nr_reason=nr_reason,
        senders=_SENDERS[dialect],
        waiting=_WAITING[dialect],
        # A delivery's id where it keeps none: its message's (revision 0024).
        delivery_id=fragment("delivery_id"),
        # A log row's reached list where it keeps none: its recipients (revision 0026).
        reached_m=fragment("reached_m"),
    )


def create_ddl(dialect: str = "sqlite") -> list[str]:
    """``CREATE VIEW`` statements for every view, in order."""
    return [f"CREATE VIEW {v.name} AS {select_sql(v, dialect)}" for v in VIEWS]


def drop_ddl(dialect: str = "sqlite") -> list[str]:
    return [f"DROP VIEW IF EXISTS {v.name}" for v in reversed(VIEWS)]


__all__ = ["OUTCOMES", "VIEWS", "View", "create_ddl", "drop_ddl", "outcome_sql", "select_sql"]
