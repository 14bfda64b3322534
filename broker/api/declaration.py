"""How an operation is declared: ``Operation`` (and its ``Http`` place), and the
marks a handle's method carries (``declared``, ``operation``).

An ``Operation`` names who may call it (an agent, the operator, or a joiner:
the holder of a join credential, not yet a participant), whether it
writes, its input record (``broker.model.inputs``: every field with its type,
bounds, default and help), its result, the library function that does the
work, and where it appears on each surface. The declarations themselves, one
per operation, are the catalogue in ``broker.api.operations``.

Nothing heavy is imported here: the remote client (client mode) reads the
declarations without loading the store, and the library function is imported
on the first call (``function`` names it as ``module:name``).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from importlib import import_module
from typing import Any, Literal, TypeVar

from broker import errors
from broker.model.fields import Input
from broker.model.typecheck import self_checked

Caller = Literal["agent", "operator", "joiner"]
"""who calls: a participant (its token), the operator (the operator key), or a joiner
(someone holding a join credential, not yet a participant: ``broker.api.joiner``)"""
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Http:
    """Where an operation is on the HTTP API: a method and a path below the
    caller's base (``/api/{kind}/{id}/agent`` for an agent, the space's
    ``/api/{kind}/{id}`` for the operator). A field named in the path (``{x}``)
    is read from it; a ``GET`` reads the others from the query string, any
    other method from a JSON body."""

    method: Literal["GET", "POST", "PATCH", "DELETE"]
    path: str
    status: int = 200


@dataclass(frozen=True)
class Operation:
    """One operation of the broker, declared once (see the module's docstring)."""

    name: str
    """the broker's own dotted name (``msg.send``); an agent tool's grant (S24) by default"""
    caller: Caller
    write: bool
    input: type[Input]
    result: str
    """the name of the record it returns (of ``broker.model.records``; ``list[X]`` for many)"""
    function: str
    """the library function, ``module:name``: ``fn(store, identity, input, *, tx)`` for an
    agent's, ``fn(store, input, *, tx)`` for the operator's and a joiner's (with ``context``
    by keyword)"""
    summary: str
    """one line: the CLI command's help, the API reference's summary, the MCP tool's title"""
    description: str = ""
    """what it does, what comes back and what to do next: for a model reading the MCP tool,
    and for the API reference"""
    method: str = ""
    """the ``Agent`` / ``Operator`` method (default: the last part of ``name``)"""
    positional: tuple[str, ...] = ()
    """the fields the library method takes by position (the rest by keyword only)"""
    grant: str | None = None
    """the tool an agent must be granted (S24); None: every participant may"""
    context: tuple[str, ...] = ()
    """attributes of the calling handle the library function also takes (``process``, ``via``)"""
    http: Http | None = None
    mcp: str | None = None
    """the MCP tool's name (letters, digits and underscores)"""
    cli: str | None = None
    """the CLI command (``msg send``)"""
    waits: str | None = None
    """the field that makes a call wait for mail (a long-poll on HTTP, a doorbell in asyncio)"""
    undo: str | None = None
    """the asyncio handle's method that gives back what a result took, when the caller of a
    wait has gone in the instant it returned (a claim's messages are released)"""
    value: str | None = None
    """the field of the result record the library method returns (``count`` of a
    ``Count``); None: the record itself (a ``Done`` is None: the method returns nothing)"""
    resumes: bool = False
    """the asyncio handle may hold a result a gone waiter took (a turn, kept for its
    next call): a call that does not wait asks it first (on HTTP too)"""
    after_leave: bool = False
    """still answers once its caller has left (S4: a participant's own row)"""
    idempotent: bool = False
    spread: str | None = None
    """a field of named values (``fields.record``) the library method takes as
    ``**name`` (``create_space("run", inbox_cap=512)``)"""
    _resolved: list[Callable[..., Any]] = field(default_factory=list, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.method:
            object.__setattr__(self, "method", self.name.rsplit(".", 1)[-1])
        unknown = set(self.positional) - self.input.NAMES
        if self.spread is not None and self.spread not in self.input.NAMES:
            unknown.add(self.spread)
        if unknown:
            raise TypeError(f"{self.name}: positional {sorted(unknown)} are not fields")
        unknown = set(self.path_fields) - self.input.NAMES
        if unknown:
            raise TypeError(f"{self.name}: the path names {sorted(unknown)}, not fields")

    @cached_property
    def path_fields(self) -> tuple[str, ...]:
        """The fields the HTTP path names (``/turn/{turn_id}/seen``), in order
        (worked out once: every served call routes by them)."""
        if self.http is None:
            return ()
        return tuple(re.findall(r"\{(\w+)\}", self.http.path))

    def answer(self, result: Any) -> Any:
        """What the library method returns of ``result`` (see ``value``)."""
        if self.result == "Done":
            return None
        return result if self.value is None else getattr(result, self.value)

    @property
    def fn(self) -> Callable[..., Any]:
        """The library function, imported on first use."""
        if not self._resolved:
            module, name = self.function.split(":")
            self._resolved.append(getattr(import_module(module), name))
        return self._resolved[0]

    def result_type(self) -> Any:
        """The result's record type (``list[X]`` for many), from ``broker.model.records``."""
        from broker.model import records

        name = self.result
        if name in _PLAIN:
            return _PLAIN[name]
        if name.startswith("list[") and name.endswith("]"):
            return list[getattr(records, name[5:-1])]  # type: ignore[misc]
        return getattr(records, name)

    def accept(self, caller: Caller, inp: object) -> Any:
        """``inp`` as this operation's input record, called by ``caller``: a record
        of its class as it is, fields by name checked into one (``Agent.call``,
        ``Operator.call``); anything else is ``invalid_input``."""
        if self.caller != caller:
            article = "an" if caller[0] in "aeiou" else "a"
            raise errors.InvalidInput(
                f"{self.name} is not {article} {caller}'s operation", field="op"
            )
        if type(inp) is self.input:
            return inp
        return self.input.parse(inp)

    def take(self, args: Mapping[str, Any]) -> Any:
        """The input record from a library method's arguments (its ``locals()``:
        ``self`` and ``tx`` are not fields)."""
        names = self.input.NAMES
        return self.input.parse({k: v for k, v in args.items() if k in names})

    def signature(self) -> inspect.Signature:
        """The library method's parameters as declared (without ``self`` and ``tx``)."""
        params = []
        # the positional ones first, in the order ``positional`` names them
        by_place = sorted(
            self.input.FIELDS,
            key=lambda f: (
                self.positional.index(f.name) if f.name in self.positional else len(self.positional)
            ),
        )
        for f in by_place:
            if f.name == self.spread:
                continue
            kind = (
                inspect.Parameter.POSITIONAL_OR_KEYWORD
                if f.name in self.positional
                else inspect.Parameter.KEYWORD_ONLY
            )
            default = inspect.Parameter.empty if f.required else f.default
            params.append(inspect.Parameter(f.name, kind, default=default))
        if self.spread is not None:
            params.append(inspect.Parameter(self.spread, inspect.Parameter.VAR_KEYWORD))
        return inspect.Signature(params)


# results that are no record
_PLAIN: dict[str, Any] = {"int": int, "bool": bool, "list[str]": list[str]}


def operation(value: object) -> Operation:
    """``value`` as a declared operation, or ``invalid_input`` (a handle's
    ``call`` takes nothing else)."""
    if not isinstance(value, Operation):
        raise errors.InvalidInput("not a declared operation (broker.api.operations)", field="op")
    return value


def declared(op: Operation) -> Callable[[F], F]:
    """Mark a handle's method as the library face of ``op``: tests hold its
    signature to the declaration, and its arguments are checked by the input
    record alone (``typecheck.checked`` passes it by)."""

    def mark(fn: F) -> F:
        fn.__operation__ = op  # type: ignore[attr-defined]
        return self_checked(fn)

    return mark
