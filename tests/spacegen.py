"""Spaces with a bit of everything, for the export / import / view tests.

``rich_space`` builds one fixed space; ``plans`` is a hypothesis strategy of
random operations and ``apply_plan`` plays one into a store. Messages go
through the public API (``broker.api.handles``); the rest through ``sqlrows``.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
import sqlite3
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlrows
import trusted
from hypothesis import strategies as st

from broker import Agent, Operator, Store, errors
from broker.ids import new_id
from broker.mail.messages import append_receipt

EXPORT_NOW = "2026-06-01T00:00:00.000000Z"  # claims live at export: expiry after this


class StepClock:
    """A deterministic clock: each reading is 1 ms after the previous one."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime(2026, 1, 1, tzinfo=UTC)
        self.lock = threading.Lock()

    def __call__(self) -> datetime:
        with self.lock:
            self.now += timedelta(milliseconds=1)
            return self.now


TEMPLATE_DIR: Path | None = None  # set by conftest: pytest's cache folder, kept between runs
_TEMPLATES: dict[str, Path] = {}


def fresh_store(folder: Path, name: str = "broker.db") -> Store:
    """A migrated store in ``folder``, copied from a template (migrating is slow)."""
    target = folder / name
    copy_template(target)
    return Store(f"sqlite:///{target}", clock=StepClock())


def copy_template(target: Path) -> None:
    """Make ``target`` (and its operator key file) a copy of a freshly migrated
    store: what ``Store(url)`` would make there, without migrating again.

    The template is keyed on every file that can shape the schema (the whole
    ``broker`` package, its SQL and the migrations) and SQLite's version, so a
    change anywhere builds a new one; tests/project/test_spacegen.py compares it with a
    fresh migration."""
    key = schema_digest()
    template = _TEMPLATES.get(key)
    if template is None or not template.exists():
        template = _build_template(key)
        _TEMPLATES[key] = template
    if not target.parent.exists():  # as the store makes its folder: 0700 whatever the umask
        target.parent.mkdir(parents=True, mode=0o700)
        target.parent.chmod(0o700)
    shutil.copyfile(template, target)
    target.chmod(0o600)
    key_file = Path(f"{target}.operator-key")
    shutil.copyfile(f"{template}.operator-key", key_file)
    key_file.chmod(0o600)
    # And the writer lock file (empty, 0600) that the migration's writes make
    # beside a new store: the template's own is not kept (it is per store).
    lock = Path(f"{target}.lock")
    lock.touch(mode=0o600)
    lock.chmod(0o600)


def _build_template(key: str) -> Path:
    """The template store of ``key``: made once, shared by the runs and the
    pytest-xdist workers that use the same TEMPLATE_DIR."""
    if TEMPLATE_DIR is None:
        raise RuntimeError("spacegen.TEMPLATE_DIR is not set (tests/conftest.py sets it)")
    TEMPLATE_DIR.mkdir(parents=True, exist_ok=True, mode=0o700)
    folder = TEMPLATE_DIR / f"template-{key}"
    template = folder / "broker.db"
    if template.exists():
        return template
    # Built in a folder of its own and renamed into place whole: the database
    # and its operator key file appear together, and a concurrent builder that
    # loses the race keeps the winner's pair (never its key with our database).
    building = TEMPLATE_DIR / f"building-{os.getpid()}-{threading.get_ident()}"
    shutil.rmtree(building, ignore_errors=True)
    building.mkdir(mode=0o700)
    tmp = building / "broker.db"
    s = Store(f"sqlite:///{tmp}")
    raw = s.connect()
    raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    raw.close()
    s.close()
    for suffix in ("-wal", "-shm", ".lock"):
        Path(f"{tmp}{suffix}").unlink(missing_ok=True)
    # The operator key is made with the store (S29): each copy gets the
    # template's key file beside it, as `broker backup` copies it.
    try:
        building.rename(folder)
    except OSError:  # another process made it first: use theirs
        shutil.rmtree(building, ignore_errors=True)
    return template


def schema_sources() -> list[Path]:
    """Every file that can shape a migrated schema: all of ``broker`` (tables,
    dialect, views, the statement catalogue...) and the migration scripts."""
    import broker
    import broker.store.migrate as mig

    package = Path(broker.__file__).parent
    files = [*package.rglob("*.py"), *package.rglob("*.sql"), *mig.script_location().rglob("*")]
    return sorted({p for p in files if p.is_file() and "__pycache__" not in p.parts})


@functools.cache
def schema_digest() -> str:
    h = hashlib.sha256(sqlite3.sqlite_version.encode())
    for p in schema_sources():
        h.update(str(p.name).encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


@dataclass
class Built:
    space: str
    agents: dict[str, Agent] = field(default_factory=dict)
    pids: dict[str, str] = field(default_factory=dict)
    messages: dict[str, str] = field(default_factory=dict)


def rich_space(store: Store, kind: str = "workflow") -> Built:
    """One space with every kind of row the layout has."""
    op = Operator(store)
    space = op.create_space(kind).id
    b = Built(space)
    for name, agent, step in (
        ("lynx", "worker", "scan"),
        ("otter", "worker", "scan"),
        ("heron", "reviewer", None),
    ):
        a, _ = trusted.join(
            store,
            space,
            f"flow/{name}",
            agent=agent,
            step=step,
            role=f"{name} role",
            archetype="specialist",
            task=f"task of {name}",
        )
        b.agents[name] = a
        b.pids[name] = a.identity.participant_id
    lynx, otter, heron = b.agents["lynx"], b.agents["otter"], b.agents["heron"]
    b.messages["direct"] = lynx.send("otter", "hello otter\nsecond line").id
    b.messages["partial"] = lynx.send(["otter", "ghost"], "to otter and a ghost").id
    with contextlib.suppress(errors.NotDelivered):
        lynx.send("ghost", "nobody hears this")
    b.messages["broadcast"] = lynx.send("broadcast", "hello everyone").id
    b.messages["post"] = otter.post("a channel post").id
    b.messages["addressed"] = otter.post("for lynx", addressed_to=["lynx"]).id
    b.messages["urgent"] = op.send(space, "stop and report", to=["lynx"], urgent=True).id
    b.messages["to_operator"] = heron.send("operator", "report for the human").id
    b.messages["directive"] = sqlrows.message(
        store,
        space,
        "lynx",
        "always cite sources",
        kind="directive",
        to=["role:worker"],
        reached=["otter"],
    )
    b.messages["directive2"] = sqlrows.message(
        store, space, "lynx", "old rule", kind="directive", to=["role:worker"], reached=["otter"]
    )
    b.messages["retract"] = sqlrows.message(
        store, space, "lynx", "", kind="retract", ref=b.messages["directive2"]
    )
    for _ in range(3):
        otter.send("lynx", "more work for lynx")
    inbox = sqlrows.deliveries(store, b.pids["otter"])
    sqlrows.set_delivery(store, inbox[0], "done")
    sqlrows.set_delivery(
        store, inbox[1], "processing", lease_owner="otter", lease_expires_at=sqlrows.FAR_FUTURE
    )
    lynx_inbox = sqlrows.deliveries(store, b.pids["lynx"])
    sqlrows.set_delivery(
        store,
        lynx_inbox[-1],
        "quarantine",
        attempts=5,
        error="boom",
        reason="max_deliveries reached",
    )
    sqlrows.set_delivery(
        store, lynx_inbox[-2], "processing", lease_owner="lynx", lease_expires_at=sqlrows.LONG_AGO
    )
    tid = sqlrows.turn_with_transcript(store, space, b.pids["otter"], inbox[0], seen=True)
    sqlrows.turn_with_transcript(store, space, b.pids["otter"], inbox[1], seen=False)
    with store.write() as t:
        append_receipt(store, t, space, "otter", tid, [inbox[0]])
    sqlrows.set_cursor(store, b.pids["otter"], 1)
    # Path reservations (S37): two live (one per mode), one released.
    lynx.reserve(["docs/**", "src/*.py"], ttl=86400, reason="rewrite the docs")
    shared = otter.reserve("*.md", shared=True, ttl=86400)
    otter.release_reservation(shared[0].fence)
    otter.reserve("*.md", shared=True, ttl=86400)
    sqlrows.claim(
        store,
        space,
        "src/a.py",
        "lynx",
        at="2026-01-01T00:00:00.000000Z",
        expires="2999-01-01T00:00:00.000000Z",
    )
    sqlrows.claim(
        store,
        space,
        "src/b.py",
        "otter",
        at="2026-01-01T00:00:01.000000Z",
        expires="2999-01-01T00:00:00.000000Z",
    )
    sqlrows.end_claim(store, space, "src/b.py", event="released", at="2026-01-01T00:00:02.000000Z")
    sqlrows.claim(
        store,
        space,
        "src/c.py",
        "heron",
        at="2026-01-01T00:00:03.000000Z",
        expires="2026-01-01T00:00:04.000000Z",
    )
    sqlrows.end_claim(store, space, "src/c.py", event="expired", at="2026-01-01T00:00:05.000000Z")
    # heron leaves first: a departure ends what it holds (S4), and src/d.py is
    # to stay lapsed but not journaled yet (written as rows, after the leave).
    heron.leave()
    sqlrows.claim(
        store,
        space,
        "src/d.py",
        "heron",
        at="2026-01-01T00:00:06.000000Z",
        expires="2026-01-01T00:00:07.000000Z",
    )  # lapsed but not journaled yet: not live
    return b


def every_column_space(store: Store) -> Built:
    """``rich_space`` and then some: every optional column of every exported
    table holds a value somewhere in the space (a nullable one a non-null
    value, one with a default another value), so a round trip that drops a
    column shows (``test_export``: the exporter dropping ``reply_to`` did not)."""
    b = rich_space(store)
    op = Operator(store)
    lynx, otter = b.agents["lynx"], b.agents["otter"]
    op.set_space(b.space, inbox_cap=200)  # settings
    boss, _ = trusted.join(store, b.space, "flow/boss", lead=True)  # is_lead
    kid, _ = trusted.join(  # parent and tools (its event's parent too)
        store, b.space, "flow/kid", parent="lynx", tools=["board.read"]
    )
    mute, _ = trusted.join(store, b.space, "flow/mute", messaging=False)  # messaging off
    b.agents["boss"], b.agents["kid"], b.agents["mute"] = boss, kid, mute
    otter.set_contact_policy("listed", allow=["lynx"])  # contact_policy, contact_allow
    first = lynx.send(
        "otter",
        "threaded, keyed, important",
        thread="parser-bug",
        idempotency_key="key-1",
        importance="high",
        ack_required=True,
    )
    b.messages["reply"] = otter.send("lynx", "a reply", reply_to=first.id).id  # reply_to
    b.messages["threaded"] = first.id
    otter.next_turn()  # a real turn: its lease's process, its broadcast cursor
    quarantined = sqlrows.deliveries(store, b.pids["lynx"], state="quarantine")[0]
    sqlrows.set_lease_evidence(store, quarantined, "host:1:2", new_id())
    # a delivery's own time, not its message's: an imported line's (revision 0021)
    sqlrows.set_delivery_time(
        store, sqlrows.deliveries(store, b.pids["otter"])[0], "2026-01-02T03:04:05.000006Z"
    )
    # a delivery's own id, not the one its message gives it: an imported line's, or a
    # send's from before revision 0024
    sqlrows.set_delivery_id(store, sqlrows.deliveries(store, b.pids["otter"])[-1], new_id())
    holder, _ = trusted.join(store, b.space, "flow/holder")
    holder.claim_key("held-then-left", ttl=3600)
    holder.leave()  # the journal's reason: left
    op.stop_space(b.space)  # state
    return b


# --- random spaces --------------------------------------------------------------------
NAMES = ("lynx", "otter", "heron", "wolf#2", "lynx>otter#1")
TARGETS = (*NAMES, "broadcast", "role:worker", "step:scan", "ghost", "operator", "parent", "lead")
# Any text a store can hold: no NUL (refused on every surface and by the
# importer, S33: PostgreSQL cannot store it).
# No lone surrogate either: not text (Python cannot encode it for the driver).
_text = st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",))
_body = st.text(_text, max_size=40)
_op = st.one_of(
    st.tuples(st.just("join"), st.sampled_from(NAMES), st.sampled_from(("worker", "reviewer"))),
    st.tuples(st.just("hostile"), st.text(_text, min_size=1, max_size=30)),
    st.tuples(
        st.just("send"),
        st.integers(0, 9),
        st.lists(st.sampled_from(TARGETS), min_size=1, max_size=3, unique=True),
        _body,
    ),
    st.tuples(
        st.just("post"),
        st.integers(0, 9),
        st.lists(st.sampled_from(NAMES), max_size=2, unique=True),
        _body,
    ),
    st.tuples(
        st.just("operator"), st.sampled_from((None, "lynx", "broadcast")), st.booleans(), _body
    ),
    st.tuples(st.just("directive"), st.integers(0, 9), _body),
    st.tuples(st.just("retract"), st.integers(0, 9)),
    st.tuples(st.just("receipt"), st.integers(0, 9)),
    st.tuples(
        st.just("state"),
        st.integers(0, 99),
        st.sampled_from(("processing", "done", "quarantine", "ready")),
    ),
    st.tuples(st.just("claim"), st.text(_text, max_size=20), st.integers(0, 9), st.booleans()),
    st.tuples(st.just("end"), st.integers(0, 9), st.sampled_from(("released", "expired"))),
    st.tuples(st.just("cursor"), st.integers(0, 9), st.integers(0, 5)),
    st.tuples(st.just("turn"), st.integers(0, 9), st.booleans()),
    st.tuples(st.just("leave"), st.integers(0, 9)),
)
_join = st.tuples(st.just("join"), st.sampled_from(NAMES), st.sampled_from(("worker", "reviewer")))
_hostile = st.tuples(st.just("hostile"), st.text(_text, min_size=1, max_size=30))
plans = st.builds(
    lambda joins, hostile, ops: [*joins, *hostile, *ops],
    st.lists(_join, min_size=1, max_size=4),
    st.lists(_hostile, max_size=2),
    st.lists(_op, min_size=1, max_size=30),
)


def apply_plan(store: Store, plan: list[tuple[Any, ...]], kind: str = "workflow") -> str:
    op = Operator(store)
    space = op.create_space(kind).id
    agents: list[Agent] = []
    pids: list[str] = []
    directives: list[str] = []
    keys: list[str] = []
    for step in plan:
        name = step[0]
        try:
            if name == "join":
                a, _ = trusted.join(store, space, f"flow/{step[1]}", agent=step[2], step="scan")
                if a.identity.participant_id not in pids:
                    agents.append(a)
                    pids.append(a.identity.participant_id)
            elif name == "hostile":
                with store.read() as t:
                    taken = t.one(
                        "SELECT 1 FROM participants WHERE space_id = ? AND address = ?",
                        (space, step[1]),
                    )
                if not taken:
                    pids.append(sqlrows.participant(store, space, step[1]))
            elif name == "send" and agents:
                agents[step[1] % len(agents)].send(list(step[2]), step[3])
            elif name == "post" and agents:
                agents[step[1] % len(agents)].post(step[3], addressed_to=list(step[2]))
            elif name == "operator":
                op.send(space, step[3] or "x", to=[step[1]] if step[1] else None, urgent=step[2])
            elif name == "directive" and agents:
                a = agents[step[1] % len(agents)]
                directives.append(
                    sqlrows.message(
                        store, space, a.address, step[2], kind="directive", to=["role:worker"]
                    )
                )
            elif name == "retract" and directives:
                d = directives[step[1] % len(directives)]
                sqlrows.message(store, space, "lynx", "", kind="retract", ref=d)
            elif name == "receipt" and agents:
                a = agents[step[1] % len(agents)]
                with store.write() as t:
                    append_receipt(store, t, space, a.address, "T" * 26, [])
            elif name == "state":
                with store.read() as t:
                    ids = [
                        r[0]
                        for r in t.all(
                            f"SELECT id FROM {sqlrows.delivery_rows()} WHERE space_id = ? ORDER BY id",
                            (space,),
                        )
                    ]
                if ids:
                    sqlrows.set_delivery(
                        store,
                        ids[step[1] % len(ids)],
                        step[2],
                        lease_owner="x",
                        lease_expires_at=sqlrows.FAR_FUTURE,
                        error="e" if step[2] == "quarantine" else None,
                        reason="r",
                    )
            elif name == "claim" and pids:
                with store.read() as t:
                    holder = t.one(
                        "SELECT address FROM participants WHERE id = ?",
                        (pids[step[2] % len(pids)],),
                    )[0]
                    held = t.one(
                        "SELECT holder FROM board_claims WHERE space_id = ? AND key = ?",
                        (space, step[1]),
                    )
                if held is None or held[0] is None:
                    sqlrows.claim(
                        store,
                        space,
                        step[1],
                        holder,
                        at="2026-01-01T00:00:00.000000Z",
                        expires=sqlrows.FAR_FUTURE if step[3] else sqlrows.LONG_AGO,
                    )
                    keys.append(step[1])
            elif name == "end" and keys:
                key = keys[step[1] % len(keys)]
                with store.read() as t:
                    held = t.one(
                        "SELECT holder FROM board_claims WHERE space_id = ? AND key = ?",
                        (space, key),
                    )
                if held and held[0] is not None:
                    sqlrows.end_claim(
                        store, space, key, event=step[2], at="2026-01-02T00:00:00.000000Z"
                    )
            elif name == "cursor" and pids:
                sqlrows.set_cursor(store, pids[step[1] % len(pids)], step[2])
            elif name == "turn" and pids:
                pid = pids[step[1] % len(pids)]
                sqlrows.turn_with_transcript(store, space, pid, new_id(), seen=step[2])
            elif name == "leave" and agents:
                agents[step[1] % len(agents)].leave()
        except errors.BrokerError:
            pass  # refused sends are part of the picture: they are logged or write nothing
    return space
