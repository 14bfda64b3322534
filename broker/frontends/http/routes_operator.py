"""Operator endpoints: the operator key as Bearer (S29).

The ``GET/POST /api/{runs,sessions,agentiflows}/{id}/messages`` of spec §Served mode, plus
what the console needs: spaces, participants, the board and its claim
journal, quarantine and requeue, and the log as an SSE stream. An operator
message sent here is recorded ``via: cp`` (S9).
"""

from __future__ import annotations

from typing import Any

from broker.api.handles import Operator
from broker.frontends.http.api import Call, Endpoint, Query
from broker.frontends.http.live import View, ViewStream
from broker.frontends.http.sse import PAGE, EventStream
from broker.model.records import (
    LogEntry,
    Space,
)

BOARD_KINDS = ["post", "directive", "retract"]


def _op(call: Call) -> Operator:
    op: Operator = call.caller
    return op


async def _space(call: Call) -> tuple[Operator, Space]:
    """The operator and the space named by the path (its kind must match)."""
    op = _op(call)
    space = await call.state.run(op.get_space, call.params["id"])
    call.state.check_kind(call.params["kind"], space)
    return op, space


async def stream_messages(call: Call) -> Any:
    op, space = await _space(call)
    after = call.state.resume_point(call)

    async def page(pos: int) -> list[LogEntry]:
        rows: list[LogEntry] = await call.state.run(lambda: op.log(space.id, after=pos, limit=PAGE))
        return rows

    return EventStream(
        call.state.hubs,
        space.id,
        after,
        page,
        keepalive_s=call.state.options.keepalive_s,
        stall_s=call.state.options.stall_s,
    )


def _view_stream(call: Call, view: View) -> ViewStream:
    opts = call.state.options
    return ViewStream(call.state.views, view, keepalive_s=opts.keepalive_s, stall_s=opts.stall_s)


async def stream_state(call: Call) -> Any:
    _, space = await _space(call)
    return _view_stream(call, call.state.views.space(space.id))


async def stream_spaces(call: Call) -> Any:
    return _view_stream(call, call.state.views.spaces())


# --- participants, board, queue ------------------------------------------------------------
async def board(call: Call) -> Any:
    op, space = await _space(call)
    q = call.query
    return await call.state.run(
        lambda: op.log(space.id, after=q["after"], kinds=BOARD_KINDS, limit=q["limit"] or 1000)
    )


SPACE = "/api/{kind}/{id}"
LIMIT = Query("limit", "int", "at most this many rows (default 1000)", 1, 10_000)
AFTER = Query("after", "str", "only rows after this message id")


def endpoints() -> list[Endpoint]:
    e = [
        Endpoint("GET", "/api/spaces/stream", stream_spaces, "operator",
                 "The list of spaces as Server-Sent Events: one 'spaces' event (the whole "
                 "list) at once and after every change", stream=True),
        Endpoint("GET", SPACE + "/messages/stream", stream_messages, "operator",
                 "The log as Server-Sent Events: id = seq; Last-Event-ID (or ?after_seq) resumes",
                 query=(Query("after_seq", "int", "resume after this seq (as Last-Event-ID)",
                              0, 2**62),),
                 stream=True),
        Endpoint("GET", SPACE + "/state/stream", stream_state, "operator",
                 "The space's state as Server-Sent Events: one 'state' event (the space, "
                 "participants, live claims and reservations, activity) at once and after "
                 "every change", stream=True),
        Endpoint("GET", SPACE + "/board", board, "operator",
                 "Board posts, directives and retractions (log rows)",
                 query=(AFTER, LIMIT), returns=list[LogEntry]),
    ]  # fmt: skip
    return e
