"""Client mode: the ``Agent`` / ``Operator`` surface over HTTP (spec §Served mode).

With ``BROKER_URL=http://host:port`` or ``unix:///path/to/broker.sock`` the CLI
talks to ``broker serve`` and carries only a secret: an agent's token or the
operator key. Nothing here opens the database, and this package imports no
sqlite3, SQLAlchemy or pydantic (a CLI call's start-up is an agent's latency):
a small HTTP/1.1 client on the standard library's sockets (``wire``), the
records and the errors rebuilt from JSON (``codec``), and the two handles
(``agent``: ``RemoteAgent``, ``operator``: ``RemoteOperator``).

Results are the library's own records (``broker.model.records``), rebuilt from the
server's JSON; a refusal is the library's own error class, found by its code,
with the server's message and fields.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from broker.frontends.remote.codec import error_from, from_dict
from broker.frontends.remote.wire import (
    SCHEMES,
    TIMEOUT_S,
    Connection,
    ProtocolError,
    Response,
    Wire,
    connect,
    is_remote,
)

__all__ = [
    "SCHEMES",
    "TIMEOUT_S",
    "Connection",
    "ProtocolError",
    "RemoteAgent",
    "RemoteJoiner",
    "RemoteOperator",
    "Response",
    "Wire",
    "connect",
    "error_from",
    "from_dict",
    "is_remote",
]

if TYPE_CHECKING:
    from broker.frontends.remote.agent import RemoteAgent
    from broker.frontends.remote.joiner import RemoteJoiner
    from broker.frontends.remote.operator import RemoteOperator


def __getattr__(name: str) -> Any:
    # Each handle is imported when first named: an agent's CLI call (the common
    # one) never builds the operator's handle and the records only it returns.
    if name == "RemoteAgent":
        from broker.frontends.remote.agent import RemoteAgent

        return RemoteAgent
    if name == "RemoteJoiner":
        from broker.frontends.remote.joiner import RemoteJoiner

        return RemoteJoiner
    if name == "RemoteOperator":
        from broker.frontends.remote.operator import RemoteOperator

        return RemoteOperator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
