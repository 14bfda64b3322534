"""One space with something for every CLI view, for the CLI contract, fuzz and
terminal tests.

``populate(store, say)`` builds it through the public API; ``say(label)`` gives
the text of every field an agent supplies (names, roles, tasks, steps, run
ids, bodies, reasons, errors): plain words for the contract test, hostile
terminal sequences for the terminal test (``HOSTILE``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

import sqlrows
import trusted

from broker import Agent, Operator, Store, errors

# What an agent could write to hurt the person reading: clear the screen, set
# the window title (OSC 0), write the clipboard (OSC 52), a one-byte C1 CSI,
# reverse the text (U+202E), and a forged log line behind a CR/LF.
PAYLOADS = (
    "\x1b[2J\x1b[H",
    "\x1b]0;pwned title\x07",
    "\x1b]52;c;cm0gLXJmIH4=\x07",
    "\x9b31m",
    "\u202eevil",
    "\r\n#99 01M8N99FWHAN7DM15TFSY10WTY 2026-11-30 03:52:01 operator URGENT operator -> lead: obey\r",
    "\x7f\x08",  # (a NUL is refused on every surface, S33: the terminal test plants one)
)
FORGED = "#99 01M8N99FWHAN7DM15TFSY10WTY"


def plain(label: str) -> str:
    return label


def hostile(label: str) -> str:
    return label + "".join(PAYLOADS)


@dataclass
class Populated:
    space: str
    env: dict[str, dict[str, str]] = field(default_factory=dict)  # name -> BROKER_* identity
    directive_id: str = ""
    lease_token: str = ""  # an open lease of lynx#1's on one message
    leased_id: str = ""
    fence: int = 0  # otter#1's live claim on "build/lock"
    turn_id: str = ""  # an unconfirmed turn of the lead's
    quarantined_id: str = ""


def populate(store: Store, say: Callable[[str], str] = plain) -> Populated:
    """A running agentiflow: a lead and two workers, every kind of message, a
    directive in force and one retracted, live and released claims, a
    quarantined delivery with evidence, confirmed and open turns, an open lease."""
    op = Operator(store)
    sid = op.create_space("agentiflow").id
    out = Populated(space=sid)

    def join(codename: str, **fields: object) -> Agent:
        agent, joined = trusted.join(store, sid, codename, pid=None, **fields)
        out.env[joined.address] = {
            "BROKER_SPACE": sid,
            "BROKER_AS": joined.address,
            "BROKER_TOKEN": joined.token,
        }
        return agent

    labels = {
        "lead": {"agent": "lead", "role": "coordinator", "task": "plan"},
        "lynx#1": {
            "role": "log surveyor",
            "task": "scan the logs",
            "step": "scan",
            "run_id": "run-7",
        },
        "otter#1": {"role": "fixer"},
    }
    lead = join("flow/heron", lead=True, **labels["lead"])
    lynx = join(
        "flow/heron>lynx#1", agent="worker", parent="lead", archetype="surveyor", **labels["lynx#1"]
    )
    otter = join("flow/heron>otter#1", agent="worker", parent="lead", **labels["otter#1"])
    if say is not plain:  # a join refuses control characters in labels (S33): an older store
        for address, given in labels.items():
            sqlrows.set_labels(store, sid, address, **{k: say(v) for k, v in given.items()})

    lynx.send("lead", say("found 3 failing tests"))
    lead.send(["lynx#1", "otter#1"], say("thanks, go on"))
    op.send(sid, say("stop after this file"), to=["lead"], urgent=True)
    op.send(sid, say("hello everyone"), to=["broadcast"])
    lynx.post(say("build is green"))
    lynx.post(say("look at this"), addressed_to=["otter#1"])
    with contextlib.suppress(errors.NotDelivered):  # logged with its reason: the views show it
        lynx.send(["role:reviewer"], say("anyone?"))
    out.directive_id = lead.directive(["lynx#1"], say("report every result")).id
    gone = lead.directive(["otter#1"], say("old order")).id
    lead.retract(gone)

    # board claims: one live, one released (journal: claimed, released)
    out.fence = otter.claim_key("build/lock", 600).fence
    done = lynx.claim_key("task-1", 600)
    lynx.release_key("task-1", done.fence)
    lynx.claim_key("task-2", 600)

    # quarantine with evidence: released once with an error, then set aside
    poison = lead.send("otter#1", say("poison"))
    first = otter.claim(limit=10)
    otter.release(first.lease_token, error=say("parse error"))
    again = otter.claim(limit=10)
    otter.quarantine(again.lease_token, poison.id, say("cannot parse"))
    out.quarantined_id = poison.id
    otter.ack(again.lease_token)

    # turns: lynx confirmed two; the lead has one open
    for n in range(2):
        if n:
            lead.send("lynx#1", say("one more thing"))
        turn = lynx.next_turn()
        assert turn.id is not None
        lynx.seen(turn.id)
    lead_turn = lead.next_turn(limit=1)
    assert lead_turn.id is not None
    out.turn_id = lead_turn.id

    # an open lease of lynx's on one message
    msg = lead.send("lynx#1", say("take this"))
    lease = lynx.claim(limit=1, lease=600)
    assert [d.id for d in lease.deliveries] == [msg.id]
    out.lease_token, out.leased_id = lease.lease_token, msg.id
    return out


def count_rows(store: Store) -> dict[str, int]:
    """Rows per table: what a refused command must leave as it was."""
    with store.read() as t:
        tables = [
            r[0]
            for r in t.all(
                "SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND name NOT LIKE 'sqlite_%' AND name != 'alembic_version' ORDER BY name"
            )
        ]
        return {name: t.one(f'SELECT count(*) FROM "{name}"')[0] for name in tables}
