"""The MCP server the broker runs: the SDK's ``MCPServer``, with two of its
defaults replaced because they are wrong for a broker (S10, S33):

- Arguments are checked against the tool's own pydantic input model, which
  refuses unknown fields: a ``sender`` (or any field the schema does not list)
  is refused with ``invalid_input`` naming it. The SDK's own argument models
  ignore extra fields, so a spoofing attempt would otherwise run silently.
- Failures reach the client as the broker's error code and its one-line
  reason (``not_delivered: not delivered to zed: unknown_participant``), with
  the structured fields beside it, as a tool error (``isError``). The SDK
  turns an exception into "Error executing tool X" and keeps the reason.

Tools are ``ToolSpec``s: a name, the grant it needs (S24), a description
written for a model, and either a declared operation (``broker.api.operations``:
its input record is the tool's schema and its one check, and the library runs
it through the server's executor: the group committer inside ``broker serve``)
or, for a tool not yet declared, an input model and an async handler taking the
caller (an ``AsyncAgent`` or ``AsyncOperator`` bound to the connection) and the
validated input. Tool names use underscores (``msg_send``); the broker's own
dotted name (``msg.send``) is in each description: see the README's MCP section.
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from mcp_types import Tool as MCPTool
from pydantic import BaseModel, ValidationError

from broker import __version__, errors
from broker.api import aio
from broker.api.declaration import Operation
from broker.frontends.http.edge import clipped, validation_error
from broker.model.records import to_dict

log = logging.getLogger("broker.mcp")

Caller = TypeVar("Caller")
T = TypeVar("T")


class Executor(Protocol):
    """Where a declared tool's library call runs: a write gets a transaction
    (``fn(tx)``), a read runs as it is."""

    async def write(self, fn: Callable[[Any], T]) -> T: ...

    async def read(self, fn: Callable[[], T]) -> T: ...


class Threads:
    """The asyncio API's worker threads, each call its own transaction (``broker mcp``
    over stdio: one agent, no neighbours to commit with)."""

    async def write(self, fn: Callable[[Any], T]) -> T:
        return await aio.run(fn, None)

    async def read(self, fn: Callable[[], T]) -> T:
        return await aio.run(fn)


@dataclass(frozen=True, slots=True)
class Output:
    """A tool's result: ``text`` for the model, ``data`` as structured content."""

    text: str
    data: dict[str, Any] | None = None
    error: bool = False

    def result(self) -> CallToolResult:
        return CallToolResult(
            content=[TextContent(type="text", text=self.text)],
            structured_content=self.data,
            is_error=self.error,
        )


def data(value: Any, **extra: Any) -> Output:
    """A record (or a dict of them) as a result: JSON text and structured content.
    A list of records is the same plain list as on the other surfaces in the
    text; structured content is an object (MCP), so there it is ``{"result":
    [...]}``, the MCP SDK's own wrapping of a result that is not an object."""
    if isinstance(value, list) and not extra:
        items = _plain(value)
        return Output(text=json.dumps(items, ensure_ascii=False), data={"result": items})
    body = to_dict(value) if not isinstance(value, dict) else _plain(value)
    body.update(extra)
    return Output(text=json.dumps(body, ensure_ascii=False), data=body)


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if hasattr(value, "__dataclass_fields__"):
        return to_dict(value)
    return value


INVALID_PARAMS = -32602
BROKER_REFUSED = -32000  # JSON-RPC's server-defined range: the broker refused (data says why)


def rpc_error(exc: errors.BrokerError) -> MCPError:
    """A refusal outside a tool call (``tools/list``, a resource read) as a
    JSON-RPC error: the broker's code and reason in the message, its fields in
    ``data``. An ordinary refusal, not a crash: nothing is logged."""
    code = INVALID_PARAMS if isinstance(exc, errors.InvalidInput) else BROKER_REFUSED
    data = clipped(_plain(exc.to_dict()))
    return MCPError(code, f"{exc.code}: {data['message']}", data)


def failure(exc: errors.BrokerError) -> Output:
    """The broker's error as a tool error: code and one-line reason, fields beside."""
    data = clipped(_plain(exc.to_dict()))  # quoted input cut short (broker.frontends.http.edge)
    return Output(text=f"{exc.code}: {data['message']}", data=data, error=True)


@dataclass(frozen=True)
class ToolSpec(Generic[Caller]):
    """One MCP tool over the library."""

    name: str
    """the wire name (letters, digits and underscores: accepted by every major client)"""
    title: str
    description: str
    model: type[BaseModel] | None = None
    run: Callable[[Caller, Any], Awaitable[Output]] | None = None
    op: Operation | None = None
    """a declared operation: its input record checks the arguments, the library runs it"""
    render: Callable[[Any, Any], Output] | None = None
    """a declared tool's result for the model, from the result and the input record
    (default: the record as JSON)"""
    grant: str | None = None
    """the broker tool name it needs (S24); None: always offered (turns, operator tools)"""
    fields: dict[str, str] = field(default_factory=dict)
    """per-argument descriptions added to the generated schema"""
    annotations: ToolAnnotations | None = None

    def schema(self) -> dict[str, Any]:
        """The input schema, generated from the model (``additionalProperties``: false)."""
        if self.op is not None:
            return self.op.input.schema(tool=True)
        assert self.model is not None
        schema = self.model.model_json_schema()
        schema.pop("title", None)
        schema.pop("description", None)
        props: dict[str, Any] = schema.get("properties", {})
        for name, prop in props.items():
            prop.pop("title", None)
            if name in self.fields:
                prop["description"] = self.fields[name]
        schema.setdefault("properties", {})
        schema["additionalProperties"] = False
        return schema

    def listing(self) -> MCPTool:
        return MCPTool(
            name=self.name,
            title=self.title,
            description=self.description,
            input_schema=self.schema(),
            annotations=self.annotations,
        )


class BrokerMCP(MCPServer[Any], Generic[Caller]):
    """An MCP server for one caller: its tools, their checks, its errors.

    ``offered()`` returns the names the caller may use now (re-read on every
    ``tools/list``, so a grant is never stale); a call to a tool that is not
    offered still reaches the library, which refuses it with the
    ``tool_unavailable`` notice (S24)."""

    def __init__(
        self,
        caller: Caller,
        specs: Iterable[ToolSpec[Caller]],
        offered: Callable[[], Awaitable[frozenset[str]]] | None = None,
        *,
        instructions: str,
        executor: Executor | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            name="broker",
            title="broker: messages, board and turns for a swarm of agents",
            version=__version__,
            instructions=instructions,
            log_level="WARNING",
            **kwargs,
        )
        self.caller = caller
        self.specs = {spec.name: spec for spec in specs}
        self._offered = offered
        self.executor: Executor = executor or Threads()

    async def offered_specs(self) -> list[ToolSpec[Caller]]:
        """The tools the caller may use now (its grant re-read: never stale)."""
        granted = await self._offered() if self._offered is not None else None
        return [
            spec
            for spec in self.specs.values()
            if spec.grant is None or granted is None or spec.grant in granted
        ]

    async def list_tools(self) -> list[MCPTool]:
        try:
            return [spec.listing() for spec in await self.offered_specs()]
        except errors.BrokerError as exc:  # left, its space stopped, its token replaced
            raise rpc_error(exc) from None

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Any = None
    ) -> CallToolResult:
        return (await self.run_tool(name, arguments)).result()

    async def run_tool(self, name: str, arguments: dict[str, Any] | None) -> Output:
        """Check the arguments against the tool's model, run it, map any
        failure to the broker's code and reason."""
        spec = self.specs.get(name)
        try:
            if spec is None:
                # Only the tools this caller may use are named (S24: the others are not its).
                known = ", ".join(sorted(s.name for s in await self.offered_specs()))
                raise errors.NotFound(f"no tool {name!r}: your tools are {known}", tool=name)
            if spec.op is not None:
                inp = spec.op.input.parse(arguments or {})
                result = await self.perform(spec.op, inp)
                return spec.render(result, inp) if spec.render is not None else data(result)
            assert spec.model is not None and spec.run is not None
            try:  # as JSON, strictly: true is not 1, "5" not 5 (broker.frontends.http.edge)
                args = spec.model.model_validate_json(json.dumps(arguments or {}), strict=True)
            except ValidationError as exc:
                raise validation_error(exc) from None
            return await spec.run(self.caller, args)
        except errors.BrokerError as exc:
            return failure(exc)
        except Exception as exc:  # noqa: BLE001 - a bug must not kill the connection
            # The model gets the class of failure; the details go to stderr.
            print(f"broker mcp: {name}: {traceback.format_exc()}", file=sys.stderr)
            return failure(errors.BrokerError(f"{name} failed unexpectedly ({type(exc).__name__})"))

    async def perform(self, op: Operation, inp: Any) -> Any:
        """Run a declared operation as the connection's caller: a wait parks on
        its doorbell (the asyncio API), a write goes through the executor's
        transaction (the group committer in ``broker serve``), a read runs there."""
        caller: Any = self.caller
        if op.resumes or (op.waits is not None and getattr(inp, op.waits) > 0):
            # a wait, or a call that first returns what a cancelled wait had taken
            return await getattr(caller, op.method)(**inp.values())
        handle = caller.sync
        if op.write:
            return await self.executor.write(lambda tx: handle.call(op, inp, tx))
        return await self.executor.read(lambda: handle.call(op, inp))


def declared(
    op: Operation,
    *,
    annotations: ToolAnnotations | None = None,
    render: Callable[[Any, Any], Output] | None = None,
) -> ToolSpec[Any]:
    """The MCP tool of a declared operation: its name, title, description,
    grant and schema all come from the declaration."""
    assert op.mcp is not None, op.name
    return ToolSpec(
        name=op.mcp,
        title=op.summary,
        description=op.description or op.summary,
        op=op,
        render=render,
        grant=op.grant,
        annotations=annotations,
    )
