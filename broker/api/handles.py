"""In-process handles: the typed public API agents and operators call.

``Agent`` is a participant's identity bound to a store: the sender of
everything it sends is derived from it (S10), never passed. ``Operator`` is the
human's surface; only operator front ends (CLI, control plane, MCP operator
tool) construct it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from broker.api.agent import Agent, TeammateStatus
from broker.api.joiner import Joiner
from broker.launch import broker_command as broker_command
from broker.launch import check_env_names as check_env_names
from broker.launch import child_env as child_env
from broker.store.migrate import HEAD
from broker.store.sqlite import Store as Store
from broker.store.sqlite import Tx

if TYPE_CHECKING:
    from broker.api.operator import Operator as Operator
    from broker.model.records import Finding

__all__ = ["Agent", "Joiner", "Operator", "Store", "TeammateStatus", "Tx"]


def __getattr__(name: str) -> Any:
    # The Operator loads on first use: an agent's CLI call (one per tool call)
    # imports this module for Agent and Store only.
    if name == "Operator":
        from broker.api.operator import Operator

        globals()["Operator"] = Operator
        return Operator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


SCHEMA_HEAD = HEAD
"""The newest schema revision this broker knows (``broker db current``)."""


def newer_schema_fix(rev: str | None) -> str | None:
    """What to do about a schema revision a newer broker wrote (``broker db
    current``): upgrade broker itself, since ``db upgrade`` knows no revision
    past its head; None for any other revision."""
    from broker.store import migrate

    return f"upgrade broker ({migrate.UPGRADE_BROKER})" if migrate.is_newer(rev) else None


# --- helpers for front ends (imported lazily: a CLI call pays only for what it uses) --------
def doctor_exit_code(findings: Iterable[Finding]) -> int:
    """The exit status of ``broker doctor``: 0 all ok or info, 8 a warning, 9 an error."""
    from broker.store import maintenance

    return maintenance.exit_code(findings)


def utc_time(value: str, field: str = "since") -> str:
    """A ``since`` time as the library reads it (ISO-8601, UTC or with an
    offset) in the store's form, or ``invalid_input`` naming ``field``: the one
    reader, for front ends that check a time before they call."""
    from broker.model import typecheck

    return typecheck.utc_time(value, field)


def check_teammate_durations(lease: float | None, idle_exit: float | None) -> None:
    """The teammate loop's durations (``broker.teammates.runtime.serve``), checked as the
    library checks them, before anything runs or is written (S33): ``lease``
    as every claim's lease, ``idle_exit`` as a wait of at most a week."""
    from broker.delivery import inbox
    from broker.model import bounds

    if lease is not None:
        inbox.check_seconds(lease)
    if idle_exit is not None:
        bounds.seconds(idle_exit, "idle_exit", top=bounds.WEEK_S, zero=True)


def make_private_dirs(path: str | Path) -> None:
    """Make the folder ``path`` and its missing parents, each 0700 whatever the
    umask (S47), for a front end that writes where the user said."""
    from broker.store import runfiles

    runfiles.make_dirs(path)


def check_writable_target(path: str, field: str) -> None:
    """``invalid_input`` (naming ``field``) unless ``path`` is absent or a
    regular file: a front end that writes a path the user named never
    replaces or writes into a device, FIFO, socket or symlink."""
    from broker.store import filenames

    filenames.check_writable_target(path, field)


def joined_before(op: Operator, space: str, codename: str) -> bool:
    """Whether the address ``codename`` joins as has joined ``space`` before:
    a re-join keeps the directory fields it does not name (S40), so a front
    end's defaults (``agent run``'s ``--archetype``, ``--parent``) are a first
    join's only. A space or codename that does not resolve: False (the join
    itself refuses it, naming what is wrong)."""
    from broker import errors
    from broker.spaces.addressing import address_of

    try:
        agentiflow = op.get_space(space).kind == "agentiflow"
        op.participant(space, address_of(codename, agentiflow=agentiflow))
    except (errors.NotFound, errors.InvalidInput):
        return False
    return True


def by_sender_hint(store: Store, space_id: str) -> str:
    """The shell command that counts a space's direct messages by sender in the
    store's own SQL client (``broker demo``'s "inspect it" hint: printed for
    the user, never run here)."""
    from broker.store.sql import stmt

    query = stmt("demo.direct_by_sender").replace(":space_id", f"'{space_id}'")
    return store.sql_shell(query)


def granted_tools(messaging: bool, tools: list[str] | None, is_lead: bool) -> frozenset[str]:
    """The tools a participant's grant gives it, a lead's authority included
    (``dir show``'s tool_grant line)."""
    from broker.spaces import grants

    return grants.effective(messaging, tools, is_lead)


def with_server_urls(exc: Exception) -> None:
    """A bad store URL's message names the server forms of client mode too (the
    CLI talks to a server as well as to a file)."""
    from broker.store.dbfile import SERVER_URLS, STORE_URLS

    message = getattr(exc, "message", "")
    if STORE_URLS in message:
        message += f"; in client mode, a server's {SERVER_URLS}"
        exc.message = message  # type: ignore[attr-defined]
        exc.args = (message,)
