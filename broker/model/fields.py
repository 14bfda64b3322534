"""An operation's input, declared once: its fields with type, bounds, default and help.

An input record is a subclass of ``Input`` whose annotated attributes are
fields made here (``text``, ``texts``, ``whole``, ``seconds``, ``flag``,
``choice``)::

    class SendInput(Input):
        to: list[str] = fields.texts("Recipients ...", fields.address(), low=1, one=True)
        text: str = fields.text("The message body.", blank=False, high=BODY_MAX)

Every surface takes its part of a field from that one declaration:

- ``Input.parse`` is the one validator (S10, S33): the library, the HTTP API,
  MCP and the CLI all call it, so a refusal is the same ``invalid_input``
  naming the same field, in the same words, everywhere. It is plain Python (no
  pydantic on the hot path): a send's seven fields cost a few microseconds.
- ``Field.schema`` is the field as JSON Schema (HTTP bodies, MCP tools, the
  OpenAPI document); ``help``, ``metavar`` and the kind give the CLI option.

A ``secret`` text field (a join key, a token) is never shown: a refusal
names the field without quoting what was sent, and the record's ``repr``
masks it, so no log line or error message echoes a credential.

Strict, as S33 asks: text is not a number, a number is not a bool, ``True`` is
not 1; nothing is coerced into what the caller did not say. Text must be
storable on both backends (valid UTF-8, no NUL). A field whose default is
``None`` also takes ``None`` (JSON null): "not given".
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Self, dataclass_transform

from broker.errors import BodyTooLarge, InvalidInput
from broker.model.bounds import control_char, text_flaw

INT64 = 2**63


class _Required:
    __slots__ = ()

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()
"""The default of a field that must be given."""


def kind_of(value: object) -> str:
    """What a value is, in a refusal's words ("text, not a number")."""
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return "null" if value is None else type(value).__name__


def _plain(x: float) -> str:
    """A bound as people write it: 1048576, 0.25 (not 1.04858e+06)."""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class Field:
    """One field of an input record: what it takes, its default and its help."""

    kind = "a value"

    def __init__(
        self,
        help: str,  # noqa: A002 - the word every surface uses
        *,
        default: Any = REQUIRED,
        metavar: str | None = None,
        wire: str | None = None,
        tool: str | None = None,
    ) -> None:
        self.name = ""  # given by the record that declares it (bind)
        self.help = help
        self.default = default
        self.metavar = metavar
        self.wire = wire
        self.tool = tool

    def bind(self, name: str) -> None:
        self.name = name

    @property
    def key(self) -> str:
        """The field's name on the HTTP API and the CLI (JSON key, query parameter,
        flag, OpenAPI): its ``wire`` name where the Python name cannot be that
        word (``from``), else its name."""
        return self.wire or self.name

    @property
    def tool_key(self) -> str:
        """The field's name in an MCP tool's schema: ``tool`` where a tool may not
        show the wire name (S10: no tool lists a ``from``), else ``key``."""
        return self.tool or self.key

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def refuse(self, why: str, value: object = REQUIRED, shown: str | None = None) -> InvalidInput:
        """The refusal naming the field, quoting ``value`` (or ``shown``)."""
        if shown is None:
            shown = "" if value is REQUIRED else _shown(value)
        return InvalidInput(f"bad {self.key}{' ' if shown else ''}{shown}: {why}", field=self.key)

    def check(self, value: object) -> Any:
        """``value`` as the field keeps it, or ``invalid_input`` naming the field."""
        if value is None:
            if self.default is None:
                return None
            raise self.refuse(f"{self.kind}, not null")
        return self.convert(value)

    def convert(self, value: object) -> Any:
        raise NotImplementedError  # every kind of field has its own

    def type_schema(self) -> dict[str, Any]:
        raise NotImplementedError

    def schema(self) -> dict[str, Any]:
        """The field as JSON Schema, with its help and default."""
        out = self.type_schema()
        if self.default is None:
            out = {"anyOf": [out, {"type": "null"}]}
        out["description"] = self.help
        if not self.required:
            out["default"] = list(self.default) if isinstance(self.default, tuple) else self.default
        return out


class Text(Field):
    """Text of ``low``..``high`` characters that both backends can store.

    ``blank=False``: white space alone is refused (a message body, with
    ``empty`` saying what it is); ``strip``: kept without surrounding white
    space (an address); ``line``: one printable line, no control character (a
    name shown in a list, S31); ``pattern`` (matched whole) with ``words``
    saying what it takes."""

    kind = "text"

    def __init__(
        self,
        help: str,  # noqa: A002
        *,
        low: int = 1,
        high: int = 200,
        strip: bool = False,
        blank: bool = True,
        empty: str = "it is empty",
        line: bool = False,
        pattern: str | None = None,
        words: str | None = None,
        secret: bool = False,
        **kw: Any,
    ) -> None:
        super().__init__(help, **kw)
        self.low, self.high, self.strip, self.blank, self.line = low, high, strip, blank, line
        self.secret = secret
        self.empty = empty
        self.pattern = re.compile(pattern) if pattern else None
        self.words = words or f"text matching {pattern}"

    def refuse(self, why: str, value: object = REQUIRED, shown: str | None = None) -> InvalidInput:
        if self.secret:  # never quoted: a refusal may be logged or shown
            return InvalidInput(f"bad {self.key}: {why}", field=self.key)
        return super().refuse(why, value, shown)

    def convert(self, value: object) -> Any:
        if type(value) is not str:
            if not isinstance(value, str):
                raise self.refuse(f"text, not {kind_of(value)}")
            value = str(value)
        flaw = text_flaw(value)
        if flaw is not None:
            raise self.refuse(f"not valid text ({flaw})")
        if self.strip:
            value = value.strip()
        if not self.blank and not value.strip():
            raise self.refuse(self.empty)
        n = len(value)
        if n < self.low:
            raise self.refuse("not empty" if self.low == 1 else f"at least {self.low} characters")
        if n > self.high:
            raise self.refuse(f"at most {self.high} characters, not {n}")
        if self.line:
            bad = control_char(value)
            if bad is not None:
                raise self.refuse(f"it holds the control character {bad!r}")
        if self.pattern is not None and self.pattern.fullmatch(value) is None:
            raise self.refuse(self.words)
        return value

    def type_schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "string", "minLength": self.low, "maxLength": self.high}
        if self.pattern is not None:
            out["pattern"] = f"^(?:{self.pattern.pattern})$"
        return out


class Body(Text):
    """A message body (S10). Past ``high`` characters it is past the largest
    cap any space can set (UTF-8 takes at least a byte a character), so it is
    refused as a body over its space's cap is: ``body_too_large`` naming its
    size in bytes, never a character-count ``invalid_input`` that only the
    largest cap would meet."""

    def convert(self, value: object) -> Any:
        if isinstance(value, str) and len(value) > self.high:
            size = len(value.encode("utf-8", "surrogatepass"))
            raise BodyTooLarge(
                f"message body is {size} bytes; no space's cap is above {self.high}",
                field=self.name,
                size=size,
                cap=self.high,
            )
        return super().convert(value)


class Whole(Field):
    """A whole number from ``low`` to ``high`` (within 64 bits)."""

    kind = "a whole number"

    def __init__(self, help: str, *, low: int = 1, high: int = INT64 - 1, **kw: Any) -> None:  # noqa: A002
        super().__init__(help, **kw)
        self.low, self.high = low, high

    def convert(self, value: object) -> Any:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.refuse("a whole number is needed", value)
        if not self.low <= value <= self.high:
            raise self.refuse(f"{self.low} to {self.high}", value)
        return int(value)

    def type_schema(self) -> dict[str, Any]:
        return {"type": "integer", "minimum": self.low, "maximum": self.high}


class Number(Field):
    """A finite number from ``low`` to ``high``, kept as a float (a whole number
    is a number: ``45`` is ``45.0``)."""

    kind = "a number"

    def __init__(self, help: str, *, low: float, high: float, **kw: Any) -> None:  # noqa: A002
        super().__init__(help, **kw)
        self.low, self.high = low, high

    def convert(self, value: object) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.refuse(f"{self.kind} is needed", value)
        try:
            number = float(value)
        except OverflowError:  # an int too large for a float
            number = math.inf
        if not math.isfinite(number):
            raise self.refuse("not a finite number", value)
        if not self.low <= number <= self.high:
            # The number as it reads, 0 and 0.0 alike, from whichever surface it came.
            raise self.refuse(self.bounds(), shown=f"{number:g}")
        return number

    def bounds(self) -> str:
        return f"{_plain(self.low)} to {_plain(self.high)}"

    def type_schema(self) -> dict[str, Any]:
        return {"type": "number", "minimum": self.low, "maximum": self.high}


class Seconds(Number):
    """A duration in seconds: a finite number from ``low`` to ``high``."""

    kind = "a number of seconds"

    def bounds(self) -> str:
        return f"at least {self.low:g} and at most {self.high:g} seconds"


class Flag(Field):
    """True or false."""

    kind = "true or false"

    def convert(self, value: object) -> Any:
        if value is True or value is False:
            return value
        raise self.refuse("true or false", value)

    def type_schema(self) -> dict[str, Any]:
        return {"type": "boolean"}


class Choice(Field):
    """One of a fixed set of words."""

    kind = "one of a few words"

    def __init__(self, help: str, choices: Sequence[str], **kw: Any) -> None:  # noqa: A002
        super().__init__(help, **kw)
        self.choices = tuple(choices)
        quoted = [repr(c) for c in self.choices]
        self.said = (
            f"one of {', '.join(quoted[:-1])} or {quoted[-1]}" if len(quoted) > 1 else quoted[0]
        )

    def convert(self, value: object) -> Any:
        if type(value) is str and value in self.choices:
            return value
        raise self.refuse(self.said)

    def type_schema(self) -> dict[str, Any]:
        return {"type": "string", "enum": list(self.choices)}


def _list_of(f: Field, value: object, low: int, high: int) -> Sequence[Any]:
    """``value``, refused for ``f`` unless it is a list of ``low``..``high`` items."""
    if not isinstance(value, list | tuple):
        raise f.refuse(f"a list, not {kind_of(value)}")
    n = len(value)
    if n > high:
        raise f.refuse(f"at most {high} items, not {n}")
    if n < low:
        raise f.refuse(f"at least {low} item{'s' if low > 1 else ''}, not {n}")
    return value


class Texts(Field):
    """A list of texts, each checked as ``item``; with ``one``, a lone text is
    a list of one (``"to": "otter"`` is ``"to": ["otter"]`` on every surface)."""

    kind = "a list"

    def __init__(
        self,
        help: str,  # noqa: A002
        item: Text,
        *,
        low: int = 0,
        high: int = 64,
        one: bool = False,
        **kw: Any,
    ) -> None:
        super().__init__(help, **kw)
        self.item, self.low, self.high, self.one = item, low, high, one

    def bind(self, name: str) -> None:
        self.name = self.item.name = name
        self.item.wire, self.item.tool = self.wire, self.tool

    def convert(self, value: object) -> Any:
        if type(value) is str and self.one:
            value = [value]
        value = _list_of(self, value, self.low, self.high)
        item = self.item
        out = []
        for i, v in enumerate(value):
            try:
                out.append(item.check(v))
            except InvalidInput as exc:
                said = exc.message.replace(f"bad {self.key}", f"bad {self.key}.{i}", 1)
                raise InvalidInput(said, field=self.key) from None
        return out

    def type_schema(self) -> dict[str, Any]:
        items = self.item.type_schema()
        many: dict[str, Any] = {"type": "array", "items": items, "maxItems": self.high}
        if self.low:
            many["minItems"] = self.low
        return {"anyOf": [items, many]} if self.one else many


class Items(Field):
    """A list of input records, each checked whole by the record ``of`` (an
    ``Input`` subclass): a send-many's messages, each a send's own input. A
    refusal names the item and its field (``bad items[2].to ...``, field
    ``items[2].to``, with ``item`` 2), in the same words the record gives
    alone; the list's own bounds are refused as a list's."""

    kind = "a list"

    def __init__(
        self,
        help: str,  # noqa: A002
        of: type[Input],
        *,
        low: int = 0,
        high: int = 1000,
        **kw: Any,
    ) -> None:
        super().__init__(help, **kw)
        self.of, self.low, self.high = of, low, high

    def convert(self, value: object) -> Any:
        value = _list_of(self, value, self.low, self.high)
        of, out = self.of, []
        for i, v in enumerate(value):
            if type(v) is of:
                out.append(v)
                continue
            if not isinstance(v, Mapping):
                said = f"bad {self.key}[{i}]: fields by name, not {kind_of(v)}"
                raise InvalidInput(said, field=f"{self.key}[{i}]", item=i)
            try:
                out.append(of.parse(v))
            except InvalidInput as exc:
                raise exc.in_item(i, self.key) from None
        return out

    def type_schema(self) -> dict[str, Any]:
        many: dict[str, Any] = {"type": "array", "items": self.of.schema(), "maxItems": self.high}
        if self.low:
            many["minItems"] = self.low
        return many


class Record(Field):
    """Named values, each checked by the field of that name of the record
    ``of`` (an ``Input`` subclass): only those given are kept (a space's
    settings: what the operator overrides). A name ``of`` does not declare is
    refused with the list of those it does; a value is refused as ``bad
    {noun} NAME VALUE: why``, naming its own field (not this one)."""

    kind = "named values"

    def __init__(self, help: str, of: type[Input], *, noun: str, **kw: Any) -> None:  # noqa: A002
        super().__init__(help, **kw)
        self.of, self.noun = of, noun

    def convert(self, value: object) -> Any:
        if not isinstance(value, Mapping) or not all(type(k) is str for k in value):
            raise self.refuse(f"named values, not {kind_of(value)}")
        by_name = {f.name: f for f in self.of.FIELDS}
        out: dict[str, Any] = {}
        for name, given in value.items():
            f = by_name.get(name)
            if f is None:
                flaw = text_flaw(name)
                if flaw is not None:
                    raise self.refuse(f"a name that is not valid text ({flaw})")
                raise InvalidInput(
                    f"unknown {self.noun} {_shown(name)}: the {self.noun.rsplit(' ', 1)[-1]}s are "
                    + ", ".join(by_name),
                    field=name,
                )
            try:
                if given is None:  # a named value is given: null is not "not given"
                    raise f.refuse(f"{f.kind}, not null")
                out[name] = f.convert(given)
            except InvalidInput as exc:
                why = exc.message.split(": ", 1)[-1]
                said = f"bad {self.noun} {name} {_shown(given)}: {why}"
                raise InvalidInput(said, field=name) from None
        return out

    def type_schema(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {
                f.name: {**f.type_schema(), "description": f.help} for f in self.of.FIELDS
            },
            "additionalProperties": False,
        }


# --- the field specifiers an input record is declared with (typed Any: the
# attribute's annotation is the value's type, as with dataclasses.field) ----------------
def text(
    help: str,  # noqa: A002
    *,
    default: Any = REQUIRED,
    low: int = 1,
    high: int = 200,
    strip: bool = False,
    blank: bool = True,
    empty: str = "it is empty",
    line: bool = False,
    pattern: str | None = None,
    words: str | None = None,
    metavar: str | None = None,
    secret: bool = False,
    wire: str | None = None,
    tool: str | None = None,
) -> Any:
    return Text(
        help, default=default, low=low, high=high, strip=strip, blank=blank, empty=empty,
        line=line, pattern=pattern, words=words, metavar=metavar, secret=secret, wire=wire,
        tool=tool,
    )  # fmt: skip


def texts(
    help: str,  # noqa: A002
    item: Any,
    *,
    default: Any = REQUIRED,
    low: int = 0,
    high: int = 64,
    one: bool = False,
    metavar: str | None = None,
    wire: str | None = None,
    tool: str | None = None,
) -> Any:
    return Texts(
        help, item, default=default, low=low, high=high, one=one, metavar=metavar, wire=wire,
        tool=tool,
    )  # fmt: skip


def whole(
    help: str,  # noqa: A002
    *,
    default: Any = REQUIRED,
    low: int = 1,
    high: int = INT64 - 1,
    metavar: str | None = None,
) -> Any:
    return Whole(help, default=default, low=low, high=high, metavar=metavar)


def number(
    help: str,  # noqa: A002
    *,
    default: Any = REQUIRED,
    low: float,
    high: float,
    metavar: str | None = None,
    of: type[Number] = Number,
) -> Any:
    return of(help, default=default, low=low, high=high, metavar=metavar)


def seconds(help: str, *, default: Any = REQUIRED, low: float, high: float) -> Any:  # noqa: A002
    """A ``number`` of seconds: worded as one (``Seconds``), ``SECONDS`` in the CLI."""
    return number(help, default=default, low=low, high=high, metavar="SECONDS", of=Seconds)


def record(
    help: str,  # noqa: A002
    of: type[Input],
    *,
    noun: str,
    default: Any = REQUIRED,
    metavar: str | None = "KEY=VALUE",
) -> Any:
    return Record(help, of, noun=noun, default=default, metavar=metavar)


def items(
    help: str,  # noqa: A002
    of: type[Input],
    *,
    default: Any = REQUIRED,
    low: int = 0,
    high: int = 1000,
    metavar: str | None = "JSON",
) -> Any:
    return Items(help, of, default=default, low=low, high=high, metavar=metavar)


def flag(help: str, *, default: Any = False) -> Any:  # noqa: A002
    return Flag(help, default=default)


def choice(help: str, choices: Sequence[str], *, default: Any = REQUIRED) -> Any:  # noqa: A002
    return Choice(help, choices, default=default)


# --- input records ------------------------------------------------------------------------
@dataclass_transform(kw_only_default=True, frozen_default=True, field_specifiers=(text, texts, whole, seconds, number, record, items, flag, choice))  # fmt: skip
class Input:
    """An operation's input: an immutable record whose fields are declared once.

    ``parse(data)`` (and the constructor, by keyword) is the one validator:
    every field is checked in the order declared, a required field that is
    missing or a field the record does not list is refused (S10), and the
    first refusal is ``invalid_input`` naming its field. Instances compare
    equal when their class and values are."""

    FIELDS: ClassVar[tuple[Field, ...]] = ()
    ONE_OF: ClassVar[tuple[tuple[str, ...], ...]] = ()
    """groups of fields of which at most one may be given (not None): two cursors,
    a first-N and a last-N; a second is refused naming both, as given"""
    NAMES: ClassVar[frozenset[str]] = frozenset()
    KEYS: ClassVar[frozenset[str]] = frozenset()
    """what ``parse`` takes: the fields' names, wire names and tool names"""
    WIRE: ClassVar[dict[str, str]] = {}
    """each field's name -> its wire name (``from``), as a client sends it"""
    _PLAN: ClassVar[tuple[tuple[str, Field, Any, Callable[[object], Any], bool], ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        declared = list(cls.FIELDS)
        for name in cls.__dict__.get("__annotations__", {}):
            spec = cls.__dict__.get(name)
            if not isinstance(spec, Field):
                raise TypeError(f"{cls.__qualname__}.{name}: declare it with a field specifier")
            spec.bind(name)
            delattr(cls, name)
            declared = [f for f in declared if f.name != name] + [spec]
        cls.FIELDS = tuple(declared)
        cls.NAMES = frozenset(f.name for f in declared)
        unknown = {name for group in cls.ONE_OF for name in group} - cls.NAMES
        if unknown:
            raise TypeError(f"{cls.__qualname__}.ONE_OF: {sorted(unknown)} are not fields")
        cls.KEYS = cls.NAMES | {k for f in declared for k in (f.key, f.tool_key)}
        cls.WIRE = {f.name: f.key for f in declared}
        # What ``_fill`` walks per field, looked up once here, not per call
        # (every call of every surface parses a record).
        cls._PLAN = tuple(
            (f.name, f, f.default, f.convert, f.wire is not None or f.tool is not None)
            for f in declared
        )

    def __init__(self, **values: Any) -> None:
        self._fill(values)

    @classmethod
    def parse(cls, data: object) -> Self:
        """``data`` (a JSON object, a tool call's arguments, a method's
        parameters by name) checked into this record, or ``invalid_input``."""
        if type(data) is not dict and not isinstance(data, Mapping):
            raise InvalidInput(f"the input is {kind_of(data)}, not fields by name", field="input")
        if not set(map(type, data)) <= _STR_ONLY:  # every key a str, looped in C
            raise InvalidInput(f"the input is {kind_of(data)}, not fields by name", field="input")
        made = cls.__new__(cls)
        made._fill(data)
        return made

    def _fill(self, data: Mapping[str, Any]) -> None:
        values = self.__dict__
        get = data.get
        for name, f, default, convert, aliased in self._PLAN:
            # a surface names it by its key, the library method by its name
            if aliased:
                values[name] = _aliased(data, f)
                continue
            given = get(name, REQUIRED)
            if given is REQUIRED:
                if default is REQUIRED:
                    raise InvalidInput(f"bad {name}: required", field=name)
                values[name] = default
            elif given is None:  # Field.check's null, without its call
                if default is not None:
                    raise f.refuse(f"{f.kind}, not null")
                values[name] = None
            else:
                values[name] = convert(given)
        if not self.KEYS.issuperset(data):
            for name in data:
                if name not in self.KEYS:
                    raise InvalidInput(
                        f"unknown field {name!r}: this tool does not take it", field=name
                    )
        for group in self.ONE_OF:
            given = [self.field(n) for n in group if values[n] is not None]
            if len(given) > 1:
                # named as the caller gave them: a field's wire or tool name if so
                said = [next((k for k in (f.key, f.tool_key) if k in data), f.name) for f in given]
                raise InvalidInput(f"{said[0]} and {said[1]} exclude each other", field=said[1])

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.__dict__ == self.__dict__

    def __hash__(self) -> int:
        return hash((type(self), *map(_hashable, self.__dict__.values())))

    def __repr__(self) -> str:
        hidden = {f.name for f in self.FIELDS if getattr(f, "secret", False)}
        shown = ", ".join(
            f"{k}={'***' if k in hidden and v is not None else repr(v)}"
            for k, v in self.__dict__.items()
        )
        return f"{type(self).__qualname__}({shown})"

    @classmethod
    def schema(
        cls, leave_out: frozenset[str] = frozenset(), *, tool: bool = False
    ) -> dict[str, Any]:
        """The record as a JSON Schema object, closed to other fields (S10): its
        properties named as the HTTP API names them, or (``tool``) an MCP tool."""
        kept = [f for f in cls.FIELDS if f.name not in leave_out]
        keys = {f.name: f.tool_key if tool else f.key for f in kept}
        out: dict[str, Any] = {
            "type": "object",
            "properties": {keys[f.name]: f.schema() for f in kept},
            "additionalProperties": False,
        }
        required = [keys[f.name] for f in kept if f.required]
        if required:
            out["required"] = required
        return out

    @classmethod
    def field(cls, name: str) -> Field:
        """The field declared as ``name``."""
        return next(f for f in cls.FIELDS if f.name == name)

    def values(self) -> dict[str, Any]:
        """The fields by name (a new dict: lists stay lists, as JSON carries them;
        a list of records, ``Items``, is a list of their values)."""
        out = dict(self.__dict__)
        for f in self.FIELDS:
            if isinstance(f, Items) and out[f.name] is not None:
                out[f.name] = [item.values() for item in out[f.name]]
        return out

    def replace(self, **changes: Any) -> Self:
        """A copy with ``changes`` applied (and checked)."""
        return type(self).parse({**self.__dict__, **changes})


_STR_ONLY = frozenset({str})


def _aliased(data: Mapping[str, Any], f: Field) -> Any:
    """A field of several names (``Field.wire``, ``Field.tool``) as given by one of
    them; a refusal names it as given (``bad written_by`` to an MCP tool)."""
    given = [k for k in dict.fromkeys((f.name, f.key, f.tool_key)) if k in data]
    if not given:
        if f.default is REQUIRED:
            raise InvalidInput(f"bad {f.key}: required", field=f.key)
        return f.default
    if len(given) > 1:
        raise InvalidInput(f"give {given[0]} once (not also as {given[1]})", field=given[1])
    used = given[0]
    try:
        return f.check(data[used])
    except InvalidInput as exc:
        said = exc.message.replace(f"bad {f.key}", f"bad {used}", 1)
        raise InvalidInput(said, field=used) from None


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value
