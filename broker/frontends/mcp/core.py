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
written for a model, the input model and an async handler taking the caller
(an ``AsyncAgent`` or ``AsyncOperator`` bound to the connection) and the
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
from typing import Any, Generic, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from mcp_types import Tool as MCPTool
from pydantic import BaseModel, ValidationError

from broker import __version__, errors
from broker.frontends.http.edge import clipped
from broker.model.inputs import validation_error
from broker.model.records import to_dict

log = logging.getLogger("broker.mcp")

Caller = TypeVar("Caller")


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
    """A record (or a dict of them) as a result: JSON text and structured content."""
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
    model: type[BaseModel]
    run: Callable[[Caller, Any], Awaitable[Output]]
    grant: str | None = None
    """the broker tool name it needs (S24); None: always offered (turns, operator tools)"""
    fields: dict[str, str] = field(default_factory=dict)
    """per-argument descriptions added to the generated schema"""
    annotations: ToolAnnotations | None = None

    def schema(self) -> dict[str, Any]:
        """The input schema, generated from the model (``additionalProperties``: false)."""
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

    async def list_tools(self) -> list[MCPTool]:
        try:
            granted = await self._offered() if self._offered is not None else None
        except errors.BrokerError as exc:  # left, its space stopped, its token replaced
            raise rpc_error(exc) from None
        return [
            spec.listing()
            for spec in self.specs.values()
            if spec.grant is None or granted is None or spec.grant in granted
        ]

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Any = None
    ) -> CallToolResult:
        return (await self.run_tool(name, arguments)).result()

    async def run_tool(self, name: str, arguments: dict[str, Any] | None) -> Output:
        """Check the arguments against the tool's model, run it, map any
        failure to the broker's code and reason."""
        spec = self.specs.get(name)
        if spec is None:
            known = ", ".join(sorted(self.specs))
            return failure(errors.NotFound(f"no tool {name!r}: the tools are {known}", tool=name))
        try:
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
