"""Everything that differs between database engines, in one place.

The rest of the code asks this module for DDL and for the few statements whose
shape depends on the engine. SQLite is the embedded default; PostgreSQL is the
second dialect (``FOR UPDATE SKIP LOCKED`` in claims, plpgsql triggers).
"""

from __future__ import annotations

from broker.vocab import APPEND_ONLY

_WAITING = "('ready', 'processing')"


def triggers_ddl(dialect: str) -> list[str]:
    """All triggers: append-only tables, and the inbox ``waiting`` counter.

    ``participants.waiting`` is derived state kept by the database itself, on
    every path that moves a delivery, so the inbox cap (S7) is one read."""
    out = (
        append_only_ddl(dialect)
        + purge_ddl(dialect)
        + any_connection_ddl(dialect)
        + sender_usage_ddl(dialect)
    )
    if dialect == "sqlite":
        out += waiting_ddl_sqlite()
    elif dialect == "postgresql":
        out.append(
            "CREATE OR REPLACE FUNCTION broker_waiting() RETURNS trigger AS $$ BEGIN "
            f"IF TG_OP = 'INSERT' AND NEW.state IN {_WAITING} THEN "
            "UPDATE participants SET waiting = waiting + 1 WHERE rowid = NEW.recipient_no; "
            f"ELSIF TG_OP = 'UPDATE' AND (OLD.state IN {_WAITING}) <> (NEW.state IN {_WAITING}) THEN "
            "UPDATE participants SET waiting = waiting + "
            f"(CASE WHEN NEW.state IN {_WAITING} THEN 1 ELSE -1 END) WHERE rowid = NEW.recipient_no; "
            "END IF; RETURN NULL; END $$ LANGUAGE plpgsql"
        )
        out.append(
            "CREATE TRIGGER deliveries_waiting AFTER INSERT OR UPDATE OF state ON deliveries "
            "FOR EACH ROW EXECUTE FUNCTION broker_waiting()"
        )
    return out


# SQLite: the inbox counter takes new deliveries in batches, as sender_usage
# takes the log: once WAITING_BATCH deliveries wait past ``folds.upto``
# ('waiting'), the insert trigger counts those still ready or processing into
# their recipients' rows and moves ``upto`` to the last. A state change moves
# the counter only for a row already counted (at or below ``upto``): the fold
# counts the others as they are then. Every reader adds its inbox's rows past
# ``upto`` (``WAITING_TAIL``). A space's delete (a purge) folds the rest and
# moves ``upto`` to the last rowid left: freed rowids are used again. A
# delivery's rowid is its message's times 2^20 plus its place among the
# message's deliveries (revision 0017): the batch is counted in messages.
WAITING_BATCH = 32
WAITING_UPTO = "coalesce((SELECT upto FROM folds WHERE name = 'waiting'), 0)"
WAITING_FOLD = (
    # The rows past upto go into the ready index (``queued``, revision 0019): a
    # send writes no index page, the fold one per inbox per batch.
    f"UPDATE deliveries SET queued = 1 WHERE rowid > {WAITING_UPTO} AND queued = 0; "
    "UPDATE participants SET waiting = waiting + (SELECT count(*) FROM deliveries w "
    f"WHERE w.rowid > {WAITING_UPTO} AND w.recipient_no = participants.rowid "
    f"AND w.state IN {_WAITING}) "
    f"WHERE rowid IN (SELECT recipient_no FROM deliveries WHERE rowid > {WAITING_UPTO}); "
    "INSERT INTO folds (name, upto) "
    "SELECT 'waiting', coalesce(max(rowid), 0) FROM deliveries WHERE true "
    "ON CONFLICT (name) DO UPDATE SET upto = excluded.upto;"
)


def waiting_ddl_sqlite() -> list[str]:
    return [
        "CREATE TRIGGER IF NOT EXISTS deliveries_waiting_insert AFTER INSERT ON deliveries "
        f"WHEN (NEW.rowid >> 20) - ({WAITING_UPTO} >> 20) >= {WAITING_BATCH} "
        f"BEGIN {WAITING_FOLD} END",
        "CREATE TRIGGER IF NOT EXISTS deliveries_waiting_update AFTER UPDATE OF state ON deliveries "
        f"WHEN (OLD.state IN {_WAITING}) != (NEW.state IN {_WAITING}) "
        f"AND NEW.rowid <= {WAITING_UPTO} "
        "BEGIN UPDATE participants SET waiting = waiting + "
        f"(CASE WHEN NEW.state IN {_WAITING} THEN 1 ELSE -1 END) WHERE rowid = NEW.recipient_no; END",
        "CREATE TRIGGER IF NOT EXISTS spaces_waiting AFTER DELETE ON spaces "
        f"BEGIN {WAITING_FOLD} END",
    ]


def _space_of(table: str, row: str = "OLD") -> str:
    """The space id of the trigger's row: the log names its space by number
    (revision 0023), the journals by id."""
    if table == "messages":
        return f"(SELECT id FROM spaces WHERE rowid = {row}.space_no)"
    return f"{row}.space_id"


def append_only_ddl(dialect: str) -> list[str]:
    """Triggers that make the log and the journals append-only in the database.

    A DELETE passes only for the space a purge is deleting: the one with a row in
    ``purging``, which ``broker.interchange.purge`` writes and removes in its own transaction
    (spec §Retention)."""
    out: list[str] = []
    if dialect == "sqlite":
        for table in APPEND_ONLY:
            out.append(
                f"CREATE TRIGGER IF NOT EXISTS {table}_no_update BEFORE UPDATE ON {table} "
                f"BEGIN SELECT RAISE(ABORT, 'append-only: {table} refuses UPDATE'); END"
            )
            out.append(
                f"CREATE TRIGGER IF NOT EXISTS {table}_no_delete BEFORE DELETE ON {table} "
                f"WHEN NOT EXISTS (SELECT 1 FROM purging WHERE space_id = {_space_of(table)}) "
                f"BEGIN SELECT RAISE(ABORT, 'append-only: {table} refuses DELETE'); END"
            )
    elif dialect == "postgresql":
        out.append(
            # A branch not taken reads no field: the log has no space_id (revision 0023).
            "CREATE OR REPLACE FUNCTION broker_append_only() RETURNS trigger AS $$ "
            "DECLARE s text; BEGIN IF TG_OP = 'DELETE' THEN "
            f"IF TG_TABLE_NAME = 'messages' THEN s := {_space_of('messages')}; "
            "ELSE s := OLD.space_id; END IF; "
            "IF EXISTS (SELECT 1 FROM purging WHERE space_id = s) THEN RETURN OLD; END IF; "
            "END IF; "
            "RAISE EXCEPTION 'append-only: % refuses %', TG_TABLE_NAME, TG_OP; END $$ "
            "LANGUAGE plpgsql"
        )
        for table in APPEND_ONLY:
            out.append(
                f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
                f"FOR EACH ROW EXECUTE FUNCTION broker_append_only()"
            )
    return out


def purge_ddl(dialect: str) -> list[str]:
    """The purge journal is append-only; a purge marker only for an archived space."""
    if dialect == "sqlite":
        return [
            "CREATE TRIGGER IF NOT EXISTS purges_no_update BEFORE UPDATE ON purges "
            "BEGIN SELECT RAISE(ABORT, 'append-only: purges refuses UPDATE'); END",
            "CREATE TRIGGER IF NOT EXISTS purges_no_delete BEFORE DELETE ON purges "
            "BEGIN SELECT RAISE(ABORT, 'append-only: purges refuses DELETE'); END",
            "CREATE TRIGGER IF NOT EXISTS purging_archived_only BEFORE INSERT ON purging "
            "WHEN (SELECT state FROM spaces WHERE id = NEW.space_id) IS NOT 'archived' "
            "BEGIN SELECT RAISE(ABORT, 'purge: only an archived space can be purged'); END",
            "CREATE TRIGGER IF NOT EXISTS purging_no_update BEFORE UPDATE ON purging "
            "BEGIN SELECT RAISE(ABORT, 'purge: a purge marker cannot change'); END",
        ]
    if dialect == "postgresql":
        return [
            "CREATE TRIGGER purges_append_only BEFORE UPDATE OR DELETE ON purges "
            "FOR EACH ROW EXECUTE FUNCTION broker_append_only()",
            "CREATE OR REPLACE FUNCTION broker_purging() RETURNS trigger AS $$ BEGIN "
            "IF TG_OP = 'UPDATE' OR (SELECT state FROM spaces WHERE id = NEW.space_id) "
            "IS DISTINCT FROM 'archived' THEN "
            "RAISE EXCEPTION 'purge: only an archived space can be purged'; END IF; "
            "RETURN NEW; END $$ LANGUAGE plpgsql",
            "CREATE TRIGGER purging_archived_only BEFORE INSERT OR UPDATE ON purging "
            "FOR EACH ROW EXECUTE FUNCTION broker_purging()",
        ]
    return []


# SQLite: ``sender_usage`` and ``space_usage`` take the log in batches, as the
# search index does: once USAGE_BATCH log rows wait past ``folds.upto``, the
# insert trigger adds them all to their senders' and their space's rows and
# moves ``upto`` to the last (three pages every 32 sends instead of two pages
# every send). Readers add the rows past ``upto`` themselves
# (usage.sender_log_bytes, usage.top_senders, shares.log_bytes, the fragment
# log_bytes). A space's delete (a purge) folds the tail of the other spaces
# first and then sets ``upto`` to the log's last rowid: rowids freed at the top
# of the log are used again, and must count when they are. (The space's total
# has a row of its own, revision 0020: summing its senders' rows cost a send a
# read per sender, 8 us more at 65 senders.)
USAGE_BATCH = 32
USAGE_UPTO = "coalesce((SELECT upto FROM folds WHERE name = 'sender_usage'), 0)"
USAGE_FOLD = (
    "INSERT INTO space_usage (space_id, log_bytes) "
    "SELECT s.id, sum(m.size_bytes) FROM messages m JOIN spaces s ON s.rowid = m.space_no "
    f"WHERE m.rowid > {USAGE_UPTO} GROUP BY s.id "
    "ON CONFLICT (space_id) DO UPDATE SET log_bytes = log_bytes + excluded.log_bytes; "
    "INSERT INTO sender_usage (space_id, sender, log_bytes, messages) "
    "SELECT s.id, m.sender, sum(m.size_bytes), count(*) FROM messages m "
    f"JOIN spaces s ON s.rowid = m.space_no WHERE m.rowid > {USAGE_UPTO} GROUP BY s.id, m.sender "
    "ON CONFLICT (space_id, sender) DO UPDATE SET "
    "log_bytes = log_bytes + excluded.log_bytes, messages = messages + excluded.messages; "
    "INSERT INTO folds (name, upto) "
    "SELECT 'sender_usage', coalesce(max(rowid), 0) FROM messages WHERE true "
    "ON CONFLICT (name) DO UPDATE SET upto = excluded.upto;"
)


# The keys of each append-only table: a row with one of them already taken is
# what ``INSERT OR REPLACE`` / ``REPLACE`` deletes first (S43). Each UNIQUE
# index of the table is here (tests/contract/test_append_only.py checks the schema).
UNIQUE_KEYS: dict[str, tuple[tuple[str, ...], ...]] = {
    # messages: no key of ids (revision 0018: an id names its row's seq).
    "messages": (("space_no", "seq"), ("space_no", "sender", "idempotency_key")),
    "participant_events": (("id",),),
    "transcript": (("id",),),
    "claim_journal": (("id",),),
    "purges": (("id",),),
}


def any_connection_ddl(dialect: str) -> list[str]:
    """S43: append-only against any connection, a plain driver's included.

    SQLite: ``REPLACE`` deletes the row it replaces without firing the DELETE
    trigger unless the connection turned ``recursive_triggers`` on (the
    broker's do, S34; a plain ``sqlite3`` does not), so a BEFORE INSERT trigger
    refuses a row whose key (any UNIQUE index of the table) is taken: whatever
    the conflict clause, nothing is replaced. PostgreSQL: ``TRUNCATE`` fires no
    row trigger, so a statement trigger refuses it (``ON CONFLICT DO UPDATE``
    already fires the UPDATE guard)."""
    out: list[str] = []
    if dialect == "sqlite":
        for table, keys in UNIQUE_KEYS.items():
            taken = " OR ".join(
                f"EXISTS (SELECT 1 FROM {table} WHERE "
                + " AND ".join(f"{c} = NEW.{c}" for c in key)
                + ")"
                for key in keys
            )
            out.append(
                f"CREATE TRIGGER IF NOT EXISTS {table}_no_replace BEFORE INSERT ON {table} "
                f"WHEN {taken} "
                f"BEGIN SELECT RAISE(ABORT, 'append-only: {table} refuses REPLACE'); END"
            )
    elif dialect == "postgresql":
        out.append(
            "CREATE OR REPLACE FUNCTION broker_no_truncate() RETURNS trigger AS $$ BEGIN "
            "RAISE EXCEPTION 'append-only: % refuses TRUNCATE', TG_TABLE_NAME; END $$ "
            "LANGUAGE plpgsql"
        )
        for table in UNIQUE_KEYS:
            out.append(
                f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} "
                "FOR EACH STATEMENT EXECUTE FUNCTION broker_no_truncate()"
            )
    return out


def sender_usage_ddl(dialect: str) -> list[str]:
    """``sender_usage`` and ``space_usage`` follow the log (S30, S11): each new
    log row adds its size to its sender's count and its space's; the rows go
    with their space (a purge). Kept by the database, like
    ``participants.waiting``, so every path that appends to the log (sends,
    receipts, imports) counts, and the share check and the log cap check are
    one read each (plus, on SQLite, the few log rows of the batch not folded in
    yet)."""
    if dialect == "sqlite":
        return [
            "CREATE TRIGGER IF NOT EXISTS messages_sender_usage AFTER INSERT ON messages "
            f"WHEN NEW.rowid - {USAGE_UPTO} >= {USAGE_BATCH} BEGIN {USAGE_FOLD} END",
            "CREATE TRIGGER IF NOT EXISTS spaces_sender_usage AFTER DELETE ON spaces "
            f"BEGIN {USAGE_FOLD} DELETE FROM sender_usage WHERE space_id = OLD.id; "
            "DELETE FROM space_usage WHERE space_id = OLD.id; END",
        ]
    if dialect == "postgresql":
        return [
            "CREATE OR REPLACE FUNCTION broker_sender_usage() RETURNS trigger AS $$ BEGIN "
            "IF TG_TABLE_NAME = 'spaces' THEN "
            "DELETE FROM sender_usage WHERE space_id = OLD.id; "
            "DELETE FROM space_usage WHERE space_id = OLD.id; RETURN NULL; END IF; "
            "INSERT INTO sender_usage (space_id, sender, log_bytes, messages) "
            f"VALUES ({_space_of('messages', 'NEW')}, NEW.sender, NEW.size_bytes, 1) "
            "ON CONFLICT (space_id, sender) DO UPDATE SET "
            "log_bytes = sender_usage.log_bytes + excluded.log_bytes, "
            "messages = sender_usage.messages + 1; "
            "INSERT INTO space_usage (space_id, log_bytes) "
            f"VALUES ({_space_of('messages', 'NEW')}, NEW.size_bytes) "
            "ON CONFLICT (space_id) DO UPDATE SET "
            "log_bytes = space_usage.log_bytes + excluded.log_bytes; "
            "RETURN NULL; END $$ LANGUAGE plpgsql",
            "CREATE TRIGGER messages_sender_usage AFTER INSERT ON messages "
            "FOR EACH ROW EXECUTE FUNCTION broker_sender_usage()",
            "CREATE TRIGGER spaces_sender_usage AFTER DELETE ON spaces "
            "FOR EACH ROW EXECUTE FUNCTION broker_sender_usage()",
        ]
    return []


# --- full-text search (S36) -------------------------------------------------------------
# An external-content FTS5 index over the log's text: the words live once, in
# ``messages``; the index holds only postings. FTS5 writes a new segment (and
# merges old ones) in every transaction that indexes anything: ~5 pages and
# ~100 us, half of a one-message send. So the log is indexed in batches: the
# insert trigger indexes every row past the index's last one once
# ``FTS_BATCH`` of them wait, and a search first indexes the rest (or, when it
# cannot write, matches the few waiting rows on a private index of its own:
# ``broker.mail.search``), so every sent message is found. The index always holds
# exactly the log's rows up to ``folds.upto`` ('search'), which ``integrity-check``
# verifies once the rest is indexed. A purge (spec §Retention) takes its deletes
# out of the index, for the rows the index holds; the space's delete then indexes
# the rest and sets ``upto`` to the log's last rowid (rowids freed at the top of
# the log are used again, and must be indexed when they are). Every row is
# indexed, ``seen`` receipts too: an external-content index must mirror its table
# for ``integrity-check`` and ``rebuild``; search leaves receipts out in its query
# instead. The index keeps no column sizes (``columnsize=0``, revision 0025: a
# row of 12 bytes a message): bm25 reads a row's size from its text, for the
# rows a search ranks (at most its window, broker.mail.search).
FTS_TABLE = "messages_fts"
FTS_BATCH = 32  # log rows waiting for the index before a send indexes them all
# The index's last row: every log row up to it is indexed, none after it.
FTS_INDEXED = "coalesce((SELECT upto FROM folds WHERE name = 'search'), 0)"
# The index's last row moved to the log's last row.
FTS_MARK = (
    "INSERT INTO folds (name, upto) SELECT 'search', coalesce(max(rowid), 0) FROM messages "
    "WHERE true ON CONFLICT (name) DO UPDATE SET upto = excluded.upto"
)
# Index the log rows past it, and move it.
FTS_FOLD = (
    f"INSERT INTO {FTS_TABLE} (rowid, body, thread) SELECT rowid, body, thread "
    f"FROM messages WHERE rowid > {FTS_INDEXED}; {FTS_MARK};"
)


# PostgreSQL's search index (revisions 0010, 0012): a GIN index on the
# expression the search statement matches (broker/store/sql/search.sql), so the
# planner uses it. Like the FTS5 table it is not SQLAlchemy metadata (an
# expression index). The text is first split and folded as FTS5's unicode61
# does (``broker_search_text``: diacritics and case by a fixed table, every
# character that is not a letter or digit to a space), so the 'simple'
# configuration then finds the very words FTS5 finds, whatever the database's
# locale, with no extension (S36: the same results on both backends). Thread
# words weigh 'A', body words 'D': a phrase stays inside one of them and
# ``thread:`` reads the thread's words only (broker.mail.search_query.tsquery).
PG_SEARCH_INDEX = "ix_messages_search"
PG_SEARCH_TEXT = "broker_search_text"
PG_SEARCH_VECTOR = (
    f"(to_tsvector('simple', {PG_SEARCH_TEXT}(body)) || "
    f"setweight(to_tsvector('simple', {PG_SEARCH_TEXT}(coalesce(thread, ''))), 'A'))"
)


# Where the fold table is cut for PostgreSQL: ``translate`` compares each
# character of the text with every one it maps (~4 us a character for the
# whole table, PostgreSQL 15), so each block is mapped only in a text that
# holds one of its characters, and a text with none (most: ASCII) pays one
# regular expression scan (~20 ns a character).
PG_FOLD_BLOCKS = (
    0x80,
    0xE0,
    0x100,
    0x180,
    0x370,
    0x400,
    0x430,
    0x530,
    0x1E00,
    0x1F00,
    0x2000,
    0x110000,
)


def pg_search_text_ddl() -> str:
    """``broker_search_text(text)``, from broker.store.search_fold (revision 0012
    holds this very text, frozen; tests/contract/test_search_query.py compares them):
    FTS5 unicode61's fold, then a space for every run of other characters."""
    from broker.store.search_fold import DROPPED, FOLD_FROM, FOLD_TO, WORD

    def esc(chars: str) -> str:  # every "-" of WORD joins a range (none is a word character)
        return "".join(
            c if c == "-" else f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}"
            for c in chars
        )

    pairs = [*zip(FOLD_FROM, FOLD_TO, strict=True), *((c, "") for c in DROPPED)]
    every = "".join(a for a, _ in pairs if ord(a) >= 0x80)
    blocks = []
    for low, high in zip(PG_FOLD_BLOCKS, PG_FOLD_BLOCKS[1:], strict=False):
        # Mapped characters first, then the ones translate drops (no partner).
        inside = sorted((p for p in pairs if low <= ord(p[0]) < high), key=lambda p: p[1] == "")
        if inside:
            keys = "".join(a for a, _ in inside)
            blocks.append(
                f"IF t ~ '[{esc(keys)}]' THEN t := pg_catalog.translate(t, "
                f"E'{esc(keys)}', E'{esc(''.join(b for _, b in inside))}'); END IF;"
            )
    return "\n".join(
        [
            f"CREATE OR REPLACE FUNCTION {PG_SEARCH_TEXT}(t text) RETURNS text "
            "LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$ BEGIN",
            # FTS5 folds ASCII as lower() in the "C" collation does, in any
            # locale: A-Z only (tests/contract/test_search_query.py).
            't := pg_catalog.lower(t COLLATE "C");',
            f"IF t ~ '[{esc(every)}]' THEN",
            *blocks,
            "END IF;",
            f"RETURN pg_catalog.regexp_replace(t, '[^{esc(WORD)}]+', ' ', 'g');",
            "END $$",
        ]
    )


# SQLite's implicit rowid, made an explicit identity column on PostgreSQL
# (revision 0010) on the tables the exporter reads in the order written and
# follows by position (broker/store/sql/export.sql). Not metadata, as on SQLite.
PG_ROWID = "rowid"
PG_ROWID_TABLES = frozenset(
    (
        "participant_events",
        "claim_journal",
        "deliveries",
        "turns",
        "transcript",
        "history",
        "messages",  # revision 0017: a delivery's rowid is its message's times 2^20
        "participants",  # revision 0022: a delivery's recipient_no is its recipient's
        "spaces",  # revision 0023: a log row's space_no is its space's
    )
)


def pg_hidden(name: str | None, kind: str, parents: dict[str, str | None]) -> bool:
    """What a PostgreSQL store holds beyond the metadata, as SQLite holds FTS5
    and rowids: the search index, the rowid columns and their indexes
    (alembic's ``include_name`` hook inverts this)."""
    if kind == "column":
        return name == PG_ROWID and parents.get("table_name") in PG_ROWID_TABLES
    if kind == "index":
        return name == PG_SEARCH_INDEX or (name or "").endswith(f"_{PG_ROWID}")
    return False


def search_ddl(dialect: str) -> list[str]:
    if dialect == "postgresql":
        return [
            pg_search_text_ddl(),
            f"CREATE INDEX IF NOT EXISTS {PG_SEARCH_INDEX} ON messages USING gin ({PG_SEARCH_VECTOR})",
        ]
    return [
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {FTS_TABLE} USING fts5(body, thread, "
        "content='messages', content_rowid='rowid', columnsize=0, "
        "tokenize='unicode61 remove_diacritics 2')",
        "CREATE TRIGGER IF NOT EXISTS messages_fts_insert AFTER INSERT ON messages "
        f"WHEN NEW.rowid - {FTS_INDEXED} >= {FTS_BATCH} BEGIN {FTS_FOLD} END",
        "CREATE TRIGGER IF NOT EXISTS messages_fts_delete AFTER DELETE ON messages "
        f"WHEN OLD.rowid <= {FTS_INDEXED} BEGIN "
        f"INSERT INTO {FTS_TABLE} ({FTS_TABLE}, rowid, body, thread) "
        "VALUES ('delete', OLD.rowid, OLD.body, OLD.thread); END",
        f"CREATE TRIGGER IF NOT EXISTS spaces_search AFTER DELETE ON spaces BEGIN {FTS_FOLD} END",
        # Rows logged before the index existed (an upgraded store), and its mark.
        f"INSERT INTO {FTS_TABLE} ({FTS_TABLE}) VALUES ('rebuild')",
        FTS_MARK,
    ]


# --- SQLAlchemy (migrations, the metadata comparison) ------------------------------------
_registered = False


def register_sqlalchemy() -> None:
    """Teach SQLAlchemy the one type decision of the PostgreSQL schema: a
    ``Boolean`` column is SMALLINT 0/1 there, the values SQLite stores and
    returns, so the frozen revisions (``server_default=text("0")``) and every
    statement (``messaging = 1``) run unchanged on both engines."""
    global _registered
    if _registered:
        return
    import sqlalchemy as sa
    from sqlalchemy.ext.compiler import compiles

    @compiles(sa.Boolean, "postgresql")
    def _boolean_smallint(type_: sa.Boolean, compiler: object, **kw: object) -> str:
        return "SMALLINT"

    _registered = True


def compare_type(
    context: object,
    inspected_column: object,
    metadata_column: object,
    inspected_type: object,
    metadata_type: object,
) -> bool | None:
    """alembic's type comparison, knowing that a PostgreSQL SMALLINT is the
    metadata's Boolean (``register_sqlalchemy``); None: alembic decides."""
    import sqlalchemy as sa

    if isinstance(metadata_type, sa.Boolean) and isinstance(inspected_type, sa.SmallInteger):
        return False
    return None
