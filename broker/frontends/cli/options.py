"""A command's options from a declared operation (``broker.api.operations``).

Each field of the operation's input record becomes a click parameter with the
field's help, default and kind: a list is a repeatable option, a flag an
on/off switch, a choice its words, a whole number or a duration parsed from
the typed text. Bounds are the library's own (the input record checks them
once, and a refusal names the flag the user typed: ``BrokerCommand``). The
command receives the fields as one ``args`` dict, ready for the library
method: ``me.send(**args)``.

Positional arguments are the command's choice (``arguments``): a body takes
the remaining words (``-`` reads stdin), so does a list (each word one item:
``[ID]...``), anything else one word. A list of records (``fields.Items``) is
a repeatable option whose every value is one item as a JSON object (``-``
reads them from stdin, one a line: JSON Lines). ``flags``
renames an option where the CLI's vocabulary has its own word (``--ttl`` is
every lifetime: a claim's ``lease``).
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import click

from broker import errors
from broker.api.declaration import Operation
from broker.frontends.cli._common import SECONDS, LibraryOption, Whole, text_arg
from broker.model import fields

F = TypeVar("F", bound=Callable[..., Any])
BODY = "text"  # the field a command's remaining words are


def from_operation(
    op: Operation,
    *,
    arguments: tuple[str, ...] = (),
    flags: Mapping[str, str] | None = None,
) -> Callable[[F], F]:
    """Add ``op``'s fields to a command as click parameters; the command gets
    them as ``args`` (see the module's docstring)."""
    renamed = dict(flags or {})
    declared = op.input.FIELDS

    def add(fn: F) -> F:
        @functools.wraps(fn)
        def command(**kwargs: Any) -> Any:
            args = {f.name: _value(f, kwargs.pop(_param(f, arguments))) for f in declared}
            return fn(args=args, **kwargs)

        for f in reversed(declared):  # click adds parameters bottom-up
            if f.name in arguments:
                continue
            command = _option(f, renamed.get(f.name))(command)
        for name in reversed(arguments):
            field = next(f for f in declared if f.name == name)
            command = _argument(field)(command)
        return command  # type: ignore[return-value]

    return add


def _param(f: fields.Field, arguments: tuple[str, ...]) -> str:
    """The click parameter's name: a positional argument is named as shown
    (``RUN_ID`` is ``run_id``), an option as its field."""
    if f.name in arguments and f.name != BODY and f.metavar and not isinstance(f, fields.Record):
        return f.metavar.lower()
    return f.name


def _value(f: fields.Field, given: Any) -> Any:
    if isinstance(f, fields.Items):
        return _json_items(f, given)
    if isinstance(f, fields.Record):
        return _pairs(f, given) if given else None
    if isinstance(f, fields.Texts):
        return list(given) if given else (None if f.default is None else list(f.default))
    if f.name == BODY and isinstance(given, tuple):
        return text_arg(given)
    return given


def _json_items(f: fields.Items, given: tuple[str, ...]) -> list[Any]:
    """Each word one item as a JSON object; ``-`` reads JSON Lines from stdin (a
    blank line is none). Text that is not JSON is refused naming its item; the
    record checks the rest (``bad items[2].to``)."""
    words: list[str] = []
    for word in given:
        if word != "-":
            words.append(word)
        elif sys.stdin is None:
            raise errors.InvalidInput(f"'-' reads the {f.key} from stdin, but stdin is closed")
        else:
            words += [line for line in sys.stdin.read().splitlines() if line.strip()]
    out = []
    for n, word in enumerate(words):
        try:
            out.append(json.loads(word))
        except (ValueError, RecursionError) as exc:
            where = f"{f.key}[{n}]"
            raise errors.InvalidInput(f"bad {where}: not JSON ({exc})", field=where) from None
    return out


def _pairs(f: fields.Record, given: tuple[str, ...]) -> dict[str, Any]:
    """``KEY=VALUE`` words as named values: a value is read as its field's kind
    (a whole number, a number; text the record refuses naming the key)."""
    kinds = {g.name: g for g in f.of.FIELDS}
    out: dict[str, Any] = {}
    for pair in given:
        key, sep, text = pair.partition("=")
        key, text = key.strip(), text.strip()
        if not sep or not key:
            raise errors.InvalidInput(
                f"bad {f.noun.rsplit(' ', 1)[-1]} {pair!r}: use KEY=VALUE", field=f.name
            )
        kind = kinds.get(key)
        try:
            if isinstance(kind, fields.Whole):  # 1.5 is a number, though not a whole one
                out[key] = int(text) if text.lstrip("+-").isdecimal() else float(text)
            elif isinstance(kind, fields.Number):
                out[key] = float(text)
            else:
                out[key] = text
        except ValueError:
            out[key] = text  # not such a number: the record refuses it, naming the key
    return out


def _argument(f: fields.Field) -> Callable[[F], F]:
    if isinstance(f, fields.Record):
        return click.argument(f.name, nargs=-1, required=f.required, metavar=f"{f.metavar}...")
    if f.name == BODY:
        return click.argument(f.name, nargs=-1, required=True)
    if isinstance(f, fields.Texts):  # the remaining words, each one item ([ID]...)
        shown = f.metavar or f.name.upper()
        metavar = f"{shown}..." if f.required else f"[{shown}]..."
        return click.argument(_param(f, (f.name,)), nargs=-1, required=f.required, metavar=metavar)
    return click.argument(_param(f, (f.name,)), metavar=f.metavar)


def _option(f: fields.Field, flag: str | None) -> Callable[[F], F]:
    name = flag or "--" + f.key.replace("_", "-")
    kw: dict[str, Any] = {"help": f.help, "cls": LibraryOption, "fields": (f.key,)}
    if f.metavar:
        kw["metavar"] = f.metavar
    if isinstance(f, fields.Flag):
        kw.update(is_flag=True, default=bool(f.default))
    elif isinstance(f, fields.Texts | fields.Record):
        kw.update(multiple=True, required=f.required)
        kw["help"] = f.help + " (repeatable)"
    elif isinstance(f, fields.Items):
        kw.update(multiple=True, required=f.required)
        kw["help"] = f.help + " One JSON object per option (repeatable); '-' reads JSON Lines."
    else:
        if isinstance(f, fields.Choice):
            kw["type"] = click.Choice(f.choices)
        elif isinstance(f, fields.Whole):
            kw["type"] = Whole(f.low, f.high)
        elif isinstance(f, fields.Seconds):
            kw["type"] = SECONDS
        if f.required:
            kw["required"] = True
        else:
            kw["default"] = f.default
            kw["show_default"] = f.default is not None
    return click.option(name, f.name, **kw)
